"""Rewards for speech output (the talker): a scorer interface, signal-level rewards that need
no model, remote rewards over HTTP, and a weighted combination built from config.

- :data:`AudioScorer`: the call shape, ``scorer(waveform, sample_rate, text, ground_truth)``.
- :data:`AUDIO_SCORERS`: rewards by name: ``duration``, ``silence``, ``clipping``,
  ``loudness`` (:mod:`omni_rewards.audio.signal`); add your own.
- :class:`AudioScoreRequest`: a spoken answer for :class:`omni_rewards.HttpScorerClient`.
- :class:`WeightedAudioReward`: several rewards by spec, summed with weights, each a metric.
"""

from omni_rewards.audio.api import AudioScorer, SpeechSample, check_waveform, run_audio_scorer
from omni_rewards.audio.combined import AudioRewardSpec, WeightedAudioReward
from omni_rewards.audio.registry import AUDIO_SCORERS, AudioScorerRegistry
from omni_rewards.audio.remote import AudioScoreRequest
from omni_rewards.audio.signal import (
    clipped_fraction,
    clipping_reward,
    duration_reward,
    expected_duration_s,
    loudness_reward,
    rms_dbfs,
    silence_ratio,
    silence_reward,
)
from omni_rewards.audio.wav import decode_wav_pcm16, encode_wav_pcm16

__all__ = [
    "AUDIO_SCORERS",
    "AudioRewardSpec",
    "AudioScoreRequest",
    "AudioScorer",
    "AudioScorerRegistry",
    "SpeechSample",
    "WeightedAudioReward",
    "check_waveform",
    "clipped_fraction",
    "clipping_reward",
    "decode_wav_pcm16",
    "duration_reward",
    "encode_wav_pcm16",
    "expected_duration_s",
    "loudness_reward",
    "rms_dbfs",
    "run_audio_scorer",
    "silence_ratio",
    "silence_reward",
]
