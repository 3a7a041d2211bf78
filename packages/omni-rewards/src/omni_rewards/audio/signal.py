"""Speech rewards that need no model: duration, silence, clipping and loudness.

Each reward is a pure function of one waveform ``[T]`` (float, nominal full scale ±1) with
the :data:`~omni_rewards.audio.api.AudioScorer` call shape, registered in ``AUDIO_SCORERS``
under the name in brackets below. Each returns ``{"score": s, <measurement>: value}`` with
``s`` in [0, 1], 1 = good. They are stability rewards: they keep a talker's output
well-formed (a plausible length, not mostly silent, not clipped, at a sane level) and say
nothing about *what* was said; for that, plug an ASR/WER service in through ``"http"``.

The two smooth rewards (duration, loudness) share one shape: 1 inside a tolerance band, and
outside it

    score = 2 ** -((excess / falloff) ** 2)

where ``excess`` is the distance beyond the band's edge: flat at the edge (no kink for the
policy gradient to chase), 0.5 one ``falloff`` beyond it, 1/16 at two, 1/512 at three.

Every reward raises :class:`~omni_rewards.errors.InvalidWaveformError` on an empty or
non-finite waveform (never a silent 0), and ``ValueError`` on a parameter out of range.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from omni_rewards.audio.api import check_waveform
from omni_rewards.audio.registry import AUDIO_SCORERS
from omni_rewards.errors import InvalidSpeechSampleError

TextUnit = Literal["words", "chars"]
TEXT_UNITS: tuple[TextUnit, ...] = ("words", "chars")
SilenceReference = Literal["peak", "full_scale"]
SILENCE_REFERENCES: tuple[SilenceReference, ...] = ("peak", "full_scale")

RMS_FLOOR_DBFS = -120.0
"""The level reported for digital silence (RMS 0 would be -inf dBFS)."""


# --- measurements -----------------------------------------------------------------------


def count_text_units(text: str, unit: TextUnit = "words") -> int:
    """How many units ``text`` has to speak.

    - ``words``: whitespace-separated tokens holding at least one letter or digit
      (``"Hello, world !"`` has 2).
    - ``chars``: letters and digits (``str.isalnum``, so CJK characters count, spaces and
      punctuation do not): for languages written without spaces.
    """
    if unit == "words":
        return sum(1 for token in text.split() if any(c.isalnum() for c in token))
    if unit == "chars":
        return sum(1 for c in text if c.isalnum())
    raise ValueError(f"unit must be one of {', '.join(TEXT_UNITS)}, got {unit!r}.")


def expected_duration_s(text: str, *, unit: TextUnit = "words", units_per_s: float = 2.5) -> float:
    """Seconds a speaker needs for ``text`` at ``units_per_s``: ``count_text_units / units_per_s``.

    Rough planning figures (speakers and styles vary by ±30%): English 2.5 words/s (the
    common 150 words a minute), or about 12 letters/s; Mandarin about 4-5 characters/s.
    Measure your talker's own rate on a few samples before tightening ``tolerance``.
    """
    if not units_per_s > 0:
        raise ValueError(f"units_per_s must be > 0, got {units_per_s}.")
    return count_text_units(text, unit) / units_per_s


def frame_rms(
    waveform: NDArray[Any], sample_rate: int, *, frame_ms: float = 20.0
) -> NDArray[np.float64]:
    """RMS of consecutive non-overlapping frames of ``frame_ms``; the last may be shorter."""
    x = check_waveform(waveform, sample_rate).astype(np.float64)
    if not frame_ms > 0:
        raise ValueError(f"frame_ms must be > 0, got {frame_ms}.")
    frame = max(1, round(sample_rate * frame_ms / 1000))
    starts = np.arange(0, x.size, frame)
    sums = np.add.reduceat(x * x, starts)  # [frames]
    lengths = np.diff(np.append(starts, x.size))  # [frames]
    rms: NDArray[np.float64] = np.sqrt(sums / lengths)
    return rms


def silence_ratio(
    waveform: NDArray[Any],
    sample_rate: int,
    *,
    frame_ms: float = 20.0,
    threshold_db: float = -40.0,
    reference: SilenceReference = "peak",
) -> float:
    """The fraction of the waveform's duration in silent frames, in [0, 1].

    A frame (``frame_ms``, non-overlapping) is silent when its RMS is at or below
    ``threshold_db`` relative to ``reference``: the loudest frame's RMS (``"peak"``, so the
    measure ignores the overall level) or full scale, RMS 1.0 (``"full_scale"``, dBFS). An
    all-zero waveform is all silence (ratio 1) under either reference.
    """
    if reference not in SILENCE_REFERENCES:
        raise ValueError(
            f"reference must be one of {', '.join(SILENCE_REFERENCES)}, got {reference!r}."
        )
    rms = frame_rms(waveform, sample_rate, frame_ms=frame_ms)
    level = float(rms.max()) if reference == "peak" else 1.0
    silent = rms <= level * 10 ** (threshold_db / 20)  # [frames]
    frame = max(1, round(sample_rate * frame_ms / 1000))
    lengths = np.minimum(frame, waveform.size - frame * np.arange(rms.size))  # [frames]
    return float(lengths[silent].sum() / waveform.size)


def clipped_fraction(waveform: NDArray[Any], *, threshold: float = 0.999) -> float:
    """The fraction of samples with ``|x| >= threshold`` (at or beyond full scale), in [0, 1]."""
    x = check_waveform(waveform, 1)
    if not 0 < threshold:
        raise ValueError(f"threshold must be > 0 (a fraction of full scale), got {threshold}.")
    return float(np.count_nonzero(np.abs(x) >= threshold) / x.size)


def rms_dbfs(waveform: NDArray[Any]) -> float:
    """``20 * log10(RMS)`` of the whole waveform: 0 dB is RMS 1.0 (a full-scale square wave;
    a full-scale sine is -3.01 dB). Digital silence reads :data:`RMS_FLOOR_DBFS`."""
    x = check_waveform(waveform, 1).astype(np.float64)
    rms = math.sqrt(float(np.mean(x * x)))
    return max(RMS_FLOOR_DBFS, 20 * math.log10(rms)) if rms > 0 else RMS_FLOOR_DBFS


def band_score(excess: float, falloff: float) -> float:
    """``2 ** -((excess / falloff) ** 2)``: 1 at excess 0, halving per ``falloff`` squared."""
    return float(2.0 ** -((max(0.0, excess) / falloff) ** 2))


# --- rewards ----------------------------------------------------------------------------


@AUDIO_SCORERS.register("duration")
def duration_reward(
    waveform: NDArray[Any],
    sample_rate: int,
    text: str,
    ground_truth: str | None = None,
    *,
    unit: TextUnit = "words",
    units_per_s: float = 2.5,
    tolerance: float = 0.25,
    falloff: float = 1.5,
) -> dict[str, float]:
    """[``duration``] Is the audio as long as speaking ``text`` takes?

    With ``r = duration / expected_duration_s(text)``, the distance ``d = |ln r|`` is
    symmetric in ratio (twice too long is as bad as half too short). The band is
    ``d <= ln(1 + tolerance)``; beyond it, ``excess = d - ln(1 + tolerance)`` and
    ``score = 2 ** -((excess / ln(falloff)) ** 2)``.
    Defaults: 2.5 words/s; r in [0.8, 1.25] scores 1; r = 1.875 (= 1.25 * 1.5) or
    r = 0.533 (= 0.8 / 1.5) scores 0.5.

    Returns:
        ``score``, ``duration_s``, ``expected_duration_s``.

    Raises:
        InvalidSpeechSampleError: ``text`` has no word (or character) to speak.
    """
    if tolerance < 0 or not falloff > 1:
        raise ValueError(f"need tolerance >= 0 and falloff > 1, got {tolerance} and {falloff}.")
    samples = check_waveform(waveform, sample_rate)
    expected = expected_duration_s(text, unit=unit, units_per_s=units_per_s)
    if expected == 0:
        raise InvalidSpeechSampleError(
            f"The duration reward needs text with at least one {unit[:-1]} to speak, got "
            f"{text[:80]!r}; use unit='chars' for text written without spaces."
        )
    duration = samples.size / sample_rate
    excess = abs(math.log(duration / expected)) - math.log1p(tolerance)
    return {
        "score": band_score(excess, math.log(falloff)),
        "duration_s": duration,
        "expected_duration_s": expected,
    }


@AUDIO_SCORERS.register("silence")
def silence_reward(
    waveform: NDArray[Any],
    sample_rate: int,
    text: str,
    ground_truth: str | None = None,
    *,
    max_silence_ratio: float = 0.3,
    frame_ms: float = 20.0,
    threshold_db: float = -40.0,
    reference: SilenceReference = "peak",
) -> dict[str, float]:
    """[``silence``] Is the audio mostly speech rather than silence?

    With ``s = silence_ratio(...)`` (see there for the frame and threshold), ``score = 1``
    while ``s <= max_silence_ratio`` (natural pauses and the silence a vocoder adds at either
    end), then falls linearly to 0 at ``s = 1``: ``score = (1 - s) / (1 - max_silence_ratio)``.

    Returns:
        ``score``, ``silence_ratio``.
    """
    if not 0 <= max_silence_ratio < 1:
        raise ValueError(f"max_silence_ratio must be in [0, 1), got {max_silence_ratio}.")
    ratio = silence_ratio(
        waveform, sample_rate, frame_ms=frame_ms, threshold_db=threshold_db, reference=reference
    )
    score = 1.0 if ratio <= max_silence_ratio else (1 - ratio) / (1 - max_silence_ratio)
    return {"score": score, "silence_ratio": ratio}


@AUDIO_SCORERS.register("clipping")
def clipping_reward(
    waveform: NDArray[Any],
    sample_rate: int,
    text: str,
    ground_truth: str | None = None,
    *,
    threshold: float = 0.999,
    max_clipped_fraction: float = 0.01,
) -> dict[str, float]:
    """[``clipping``] Is the audio free of samples at full scale?

    With ``c = clipped_fraction(waveform, threshold=threshold)``,
    ``score = max(0, 1 - c / max_clipped_fraction)``: 1 without clipping, 0 once
    ``max_clipped_fraction`` of the samples (default 1%) sit at or beyond ``threshold``.

    Returns:
        ``score``, ``clipped_fraction``.
    """
    if not 0 < max_clipped_fraction <= 1:
        raise ValueError(f"max_clipped_fraction must be in (0, 1], got {max_clipped_fraction}.")
    check_waveform(waveform, sample_rate)
    fraction = clipped_fraction(waveform, threshold=threshold)
    return {"score": max(0.0, 1 - fraction / max_clipped_fraction), "clipped_fraction": fraction}


@AUDIO_SCORERS.register("loudness")
def loudness_reward(
    waveform: NDArray[Any],
    sample_rate: int,
    text: str,
    ground_truth: str | None = None,
    *,
    min_dbfs: float = -30.0,
    max_dbfs: float = -12.0,
    falloff_db: float = 6.0,
) -> dict[str, float]:
    """[``loudness``] Is the audio's level in a normal range for speech?

    With ``L = rms_dbfs(waveform)`` (whole-waveform RMS, dB re RMS 1.0), ``score = 1`` for
    ``min_dbfs <= L <= max_dbfs`` (speech is commonly mastered around -20 dBFS RMS);
    outside, ``excess`` is the dB beyond the nearer edge and
    ``score = 2 ** -((excess / falloff_db) ** 2)``: 0.5 at 6 dB beyond by default. Digital
    silence (-120 dB) scores about 0.

    Returns:
        ``score``, ``rms_dbfs``.
    """
    if not min_dbfs <= max_dbfs or not falloff_db > 0:
        raise ValueError(
            f"need min_dbfs <= max_dbfs and falloff_db > 0, got {min_dbfs}, {max_dbfs} and "
            f"{falloff_db}."
        )
    check_waveform(waveform, sample_rate)
    level = rms_dbfs(waveform)
    excess = max(min_dbfs - level, level - max_dbfs)
    return {"score": band_score(excess, falloff_db), "rms_dbfs": level}
