"""The waveform's wire format for remote rewards: a mono 16-bit PCM WAV file.

Chosen over raw float32 bytes because every audio stack reads it unaided (soundfile,
torchaudio, scipy, Python's ``wave``, ffmpeg) and the file carries its own sample rate;
16 bits (96 dB of dynamic range) lose nothing an ASR or speaker model can hear. Encoding:
``pcm = round(clip(x, -1, 1) * 32767)`` as little-endian int16. Readers that divide by
32768 (soundfile, torchaudio) get the signal back 0.003% quieter, which no scorer notices.
"""

from __future__ import annotations

import io
import wave
from typing import Any

import numpy as np
from numpy.typing import NDArray

from omni_rewards.audio.api import check_waveform
from omni_rewards.errors import InvalidWaveformError

PCM16_SCALE = 32767


def encode_wav_pcm16(waveform: NDArray[Any], sample_rate: int) -> bytes:
    """A mono 16-bit PCM WAV file of ``waveform`` (samples beyond ±1 are clipped to ±1).

    Raises:
        InvalidWaveformError: the waveform cannot be scored (empty, NaN, not 1-D, ...).
    """
    samples = check_waveform(waveform, sample_rate)
    pcm = np.round(np.clip(samples, -1.0, 1.0) * PCM16_SCALE).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(int(sample_rate))
        out.writeframes(pcm.tobytes())
    return buffer.getvalue()


def decode_wav_pcm16(data: bytes) -> tuple[NDArray[np.float32], int]:
    """``(waveform [T] float32, sample_rate)`` from a file :func:`encode_wav_pcm16` wrote.

    For a Python reward service; any WAV reader does the same job.

    Raises:
        InvalidWaveformError: not a WAV file, or not mono 16-bit PCM.
    """
    try:
        with wave.open(io.BytesIO(data), "rb") as source:
            channels, width = source.getnchannels(), source.getsampwidth()
            sample_rate = source.getframerate()
            frames = source.readframes(source.getnframes())
    except (wave.Error, EOFError) as exc:
        raise InvalidWaveformError(f"Not a readable WAV file: {exc}.") from exc
    if channels != 1 or width != 2:
        raise InvalidWaveformError(
            f"Expected mono 16-bit PCM, got {channels} channels of {8 * width}-bit samples."
        )
    pcm = np.frombuffer(frames, dtype="<i2")
    return (pcm.astype(np.float32) / PCM16_SCALE).astype(np.float32), sample_rate
