"""Speech samples for a remote reward service (an ASR/WER or speaker-similarity server).

Sent by :class:`omni_rewards.HttpScorerClient` like text requests; the wire format is in
``omni_rewards.http_client``'s docstring, the WAV encoding in ``omni_rewards.audio.wav``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from numpy.typing import NDArray

from omni_rewards.audio.api import SpeechSample
from omni_rewards.audio.wav import encode_wav_pcm16


@dataclass(frozen=True, eq=False)
class AudioScoreRequest:
    """One spoken answer to score remotely.

    On the wire a second of 24 kHz audio is about 64 kB (16-bit samples, base64): for long
    answers, lower ``HttpScorerConfig.batch_size`` so that one POST stays a few MB.
    """

    waveform: NDArray[Any]
    """``[T]`` mono samples, floating point, nominal full scale ±1."""

    sample_rate: int
    text: str
    """What the talker spoke (the reference for an ASR/WER service is ``ground_truth``)."""

    ground_truth: str | None = None

    @classmethod
    def from_sample(cls, sample: SpeechSample) -> AudioScoreRequest:
        return cls(sample.waveform, sample.sample_rate, sample.text, sample.ground_truth)

    def to_json(self) -> dict[str, Any]:
        """The request's JSON object.

        Raises:
            InvalidWaveformError: the waveform cannot be sent (empty, NaN, not 1-D, ...).
        """
        wav = encode_wav_pcm16(self.waveform, self.sample_rate)
        return {
            "audio_wav_b64": base64.b64encode(wav).decode("ascii"),
            "sample_rate": int(self.sample_rate),
            "text": self.text,
            "ground_truth": self.ground_truth,
        }
