"""The speech scorer interface: what an audio reward receives, and the checks it can rely on."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import numpy as np
from numpy.typing import NDArray

from omni_rewards.api import normalise_output
from omni_rewards.errors import InvalidWaveformError

AudioScorer = Callable[..., Mapping[str, float] | float]
"""Scores one spoken answer: ``scorer(waveform, sample_rate, text, ground_truth=None, **kwargs)``.

- ``waveform``: float32 ``[T]``, mono, nominal full scale ±1. Checked before the call
  (:func:`check_waveform`: 1-D, finite, non-empty); the scorer must not modify it.
- ``sample_rate``: samples per second.
- ``text``: what the talker was asked to speak (the thinker's answer for that sample).
- ``ground_truth``: the row's ground truth, or None when the row has none.
- ``**kwargs``: the reward's parameters, from its spec (:class:`WeightedAudioReward`).

Returns what a text scorer returns (a number, or a mapping with a ``"score"`` and named
numeric sub-metrics), checked by :func:`omni_rewards.normalise_output`. Called in the
process that scores the batch, once per sample, with no timeout: a reward that runs a model
belongs behind the HTTP scorer client (:class:`omni_rewards.HttpScorerClient`).
"""


@dataclass(frozen=True, eq=False)
class SpeechSample:
    """One talker output to score. Plain data: checked when scored, not when built, so that a
    batch with one bad waveform still scores the others and counts the bad one."""

    waveform: NDArray[Any]
    """``[T]`` mono samples, floating point, nominal full scale ±1."""

    sample_rate: int
    """Samples per second."""

    text: str
    """What the talker was asked to speak."""

    ground_truth: str | None = None
    """The row's ground truth (a reference transcript, a speaker id, ...), if any."""

    data_source: str = "speech"
    """The row's ``data_source``: the key the batch metrics are grouped by."""


def check_waveform(waveform: object, sample_rate: object) -> NDArray[np.float32]:
    """``waveform`` as a float32 ``[T]`` array, after checking it can be scored.

    Float16/64 input is converted (a float64 value beyond float32's range becomes infinite,
    and is refused). Integer PCM is refused rather than guessed at: divide int16 samples by
    32768 first.

    Raises:
        InvalidWaveformError: not a numpy array, not 1-D, not floating point, empty, NaN or
            infinite samples, or a sample rate that is not a positive integer.
    """
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, Integral) or sample_rate <= 0:
        raise InvalidWaveformError(
            f"sample_rate must be a positive integer (samples per second), got {sample_rate!r}."
        )
    if not isinstance(waveform, np.ndarray):
        raise InvalidWaveformError(
            f"A waveform must be a numpy array, got {type(waveform).__name__}; convert it with "
            "numpy.asarray (a torch tensor: .detach().cpu().numpy())."
        )
    if waveform.ndim != 1:
        raise InvalidWaveformError(
            f"A waveform must be 1-D (mono samples [T]), got shape {waveform.shape}; take one "
            "channel or average the channels first."
        )
    if not np.issubdtype(waveform.dtype, np.floating):
        raise InvalidWaveformError(
            f"A waveform must hold floating-point samples with full scale ±1, got dtype "
            f"{waveform.dtype}; for 16-bit PCM divide by 32768 first."
        )
    if waveform.size == 0:
        raise InvalidWaveformError(
            "The waveform is empty (0 samples); the talker produced no audio."
        )
    with np.errstate(over="ignore"):  # float64 beyond float32's range: inf, refused below
        samples = waveform.astype(np.float32, copy=False)
    finite = np.isfinite(samples)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise InvalidWaveformError(
            f"The waveform has {bad.size} NaN or infinite samples of {samples.size} (first at "
            f"index {int(bad[0])}: {samples[bad[0]]}); the vocoder's output is broken."
        )
    return samples


def run_audio_scorer(
    scorer: AudioScorer, sample: SpeechSample, **kwargs: Any
) -> dict[str, float]:
    """Check ``sample``'s waveform, call ``scorer`` on it and check its output.

    Raises:
        InvalidWaveformError: the waveform cannot be scored (see :func:`check_waveform`).
        ScorerOutputError: the scorer returned no finite ``"score"``.
        Exception: whatever the scorer raised.
    """
    waveform = check_waveform(sample.waveform, sample.sample_rate)
    raw = scorer(waveform, int(sample.sample_rate), sample.text, sample.ground_truth, **kwargs)
    return normalise_output(raw, scorer)
