"""Exceptions raised by omni_rewards.

Every message says what was wrong and what to do about it; tests check the text.
"""

from __future__ import annotations


class RewardError(Exception):
    """Base class for every error omni_rewards raises."""


class ScorerRegistrationError(RewardError):
    """A scorer cannot be registered (not callable, empty key, or a duplicate key)."""


class UnknownDataSourceError(RewardError, LookupError):
    """No scorer is registered for a sample's ``data_source``."""


class ScorerOutputError(RewardError, ValueError):
    """A scorer returned something that is not a score (no ``"score"``, not a number, NaN)."""


class RewardWorkerError(RewardError, RuntimeError):
    """The reward worker processes could not be started or used."""


class RemoteScorerError(RewardError, RuntimeError):
    """The remote (HTTP) scorer failed after its retries, or answered malformed JSON."""


class InvalidSpeechSampleError(RewardError, ValueError):
    """A speech sample cannot be scored (e.g. the duration reward got a text with no words)."""


class InvalidWaveformError(InvalidSpeechSampleError):
    """A waveform cannot be scored: empty, not 1-D, not floating point, NaN/infinite samples,
    or a sample rate that is not a positive integer. Counted per batch, never scored 0 silently."""


class UnknownAudioRewardError(RewardError, LookupError):
    """No audio reward is registered under a name."""


class AudioRewardConfigError(RewardError, ValueError):
    """A list of audio reward specs is invalid (every problem is listed in one message)."""


class AudioRewardError(RewardError, RuntimeError):
    """One component of a combined audio reward failed on a sample (the cause is chained)."""


class JudgeRequiredError(RewardError, RuntimeError):
    """A rule scorer met a response only a judge model can score (OmniVideo-R1 QI's intent
    rewards and open answers) and no judge was asked. Counted as a failed sample by the reward
    manager, never scored 0 silently."""
