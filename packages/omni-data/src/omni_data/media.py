"""Decoding one medium for the processor, through Qwen's official loaders.

Every medium is handed to ``qwen_omni_utils.process_mm_info`` one at a time, so a failure
names the medium (and the row) instead of "something in this conversation". Before that:

- images from bytes are opened with PIL (the loader takes paths or PIL images);
- audio from bytes, or at a rate other than the loader's fixed 16 kHz, is decoded with
  soundfile and resampled with librosa, then passed as an array. WAV/FLAC need no ffmpeg;
- videos given as a file are decoded with PyAV (bundled libav, no ffmpeg binary) and
  sampled at ``fps``; videos given as frame images are used as they are.

Heavy imports (qwen_omni_utils pulls in torchvision, librosa and av) happen on first use.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Any

from omni_data.errors import MediaError
from omni_data.rows import MediaRef

QWEN_LOADER_RATE = 16_000  # qwen_omni_utils resamples every audio file to this rate


@dataclass(frozen=True)
class MediaSettings:
    """What the processor expects, read from it once (see :func:`settings_from_processor`)."""

    sampling_rate: int = 16_000
    image_patch_size: int = 14
    image_min_pixels: int | None = None
    image_max_pixels: int | None = None
    video_min_pixels: int | None = None
    video_max_pixels: int | None = None
    video_fps: float = 2.0
    video_max_frames: int = 32


def _pixels(sub: Any) -> tuple[int | None, int | None]:
    size = getattr(sub, "size", None)
    if isinstance(size, dict) and "shortest_edge" in size and "longest_edge" in size:
        # Qwen2-VL processors store the pixel budget (not edge lengths) under these names.
        return int(size["shortest_edge"]), int(size["longest_edge"])
    low, high = getattr(sub, "min_pixels", None), getattr(sub, "max_pixels", None)
    return (int(low) if low else None), (int(high) if high else None)


def settings_from_processor(processor: Any, *, video_fps: float = 2.0, video_max_frames: int = 32) -> MediaSettings:
    """Read the sampling rate, patch size and pixel budgets from a transformers processor."""
    extractor = getattr(processor, "feature_extractor", None)
    image = getattr(processor, "image_processor", None)
    video = getattr(processor, "video_processor", None)
    image_low, image_high = _pixels(image)
    video_low, video_high = _pixels(video) if video is not None else (None, None)
    return MediaSettings(
        sampling_rate=int(getattr(extractor, "sampling_rate", 16_000)),
        image_patch_size=int(getattr(image, "patch_size", 14)),
        image_min_pixels=image_low,
        image_max_pixels=image_high,
        video_min_pixels=video_low,
        video_max_pixels=video_high,
        video_fps=video_fps,
        video_max_frames=video_max_frames,
    )


def _budget(low: int | None, high: int | None) -> dict[str, int]:
    out = {}
    if low is not None:
        out["min_pixels"] = low
    if high is not None:
        out["max_pixels"] = high
    return out


def _fail(ref: MediaRef, where: str, exc: BaseException | str) -> MediaError:
    if ref.path and ref.data is None and ref.frames is None and not os.path.exists(ref.path):
        return MediaError(f"{where}: {ref.kind} file {ref.path} does not exist.", reason="missing_file")
    reason = str(exc).strip() if not isinstance(exc, str) else exc
    if not isinstance(exc, str) and not reason:  # some decoders raise with no message
        reason = f"{type(exc).__name__} (the decoder gave no message; is the file truncated or of another format?)"
    return MediaError(f"{where}: cannot decode {ref.kind} ({ref.describe()}): {reason}", reason=f"bad_{ref.kind}")


def _pil(ref: MediaRef, where: str) -> Any:
    from PIL import Image

    if ref.path and ref.data is None and not os.path.exists(ref.path):
        raise _fail(ref, where, "missing")
    try:
        with Image.open(io.BytesIO(ref.data) if ref.data is not None else ref.path) as image:  # type: ignore[arg-type]
            image.load()
            return image.convert("RGB")
    except Exception as exc:
        raise _fail(ref, where, exc) from exc


def _audio_array(ref: MediaRef, rate: int, where: str) -> Any:
    import numpy as np
    import soundfile as sf  # type: ignore[import-untyped]

    try:
        source = io.BytesIO(ref.data) if ref.data is not None else ref.path
        samples, native = sf.read(source, dtype="float32", always_2d=True)
    except Exception as exc:
        raise _fail(ref, where, exc) from exc
    mono = samples.mean(axis=1)
    if native != rate:
        import librosa

        mono = librosa.resample(mono, orig_sr=native, target_sr=rate)
    return np.ascontiguousarray(mono, dtype=np.float32)


def _trimmed(ref: MediaRef, samples: Any, rate: int) -> Any:
    """``samples`` cut to the entry's ``audio_start``/``audio_end`` (seconds), as Qwen's loader
    cuts them, at ``rate``."""
    start, end = ref.option("audio_start"), ref.option("audio_end")
    if start is None and end is None:
        return samples
    return samples[int(rate * (start or 0.0)) : None if end is None else int(rate * end)]


def _video_frames(ref: MediaRef, settings: MediaSettings, where: str) -> tuple[list[Any], float]:
    """Frames (PIL) and their sampling rate in frames per second (the entry's ``fps`` and
    ``max_frames`` override the settings')."""
    fps = ref.option("fps") or settings.video_fps
    max_frames = int(ref.option("max_frames") or settings.video_max_frames)
    if ref.frames is not None:
        return [_pil(frame, where) for frame in ref.frames], fps
    if ref.path is None or not os.path.exists(ref.path):
        raise _fail(ref, where, "missing")
    import av

    sampled: list[Any] = []
    try:
        with av.open(ref.path) as container:
            stream = container.streams.video[0]
            native = float(stream.average_rate or fps)
            # Keep every step-th frame while decoding, so a long video never sits in memory.
            step = max(1, round(native / fps))
            for index, frame in enumerate(container.decode(stream)):
                if index % step == 0:
                    sampled.append(frame.to_image())
                    if len(sampled) == max_frames:
                        break
    except Exception as exc:
        raise _fail(ref, where, exc) from exc
    if not sampled:
        raise _fail(ref, where, "the file has no video frames")
    return sampled, native / step


def decode(ref: MediaRef, settings: MediaSettings, *, where: str) -> Any:
    """One medium in the form the processor takes: a PIL image, a float32 audio array at
    ``settings.sampling_rate``, or ``(video tensor [T, C, H, W], metadata)``.

    Raises:
        MediaError: naming ``where`` and the file (reason ``missing_file`` or ``bad_<kind>``).
    """
    from qwen_omni_utils import process_mm_info  # type: ignore[import-untyped]

    part: dict[str, Any] = {"type": ref.kind}
    # The entry's own settings (pixel budgets, fixed sizes) override the processor's, as in
    # Qwen's loaders; fps/max_frames and audio_start/audio_end are applied here.
    sizes = {k: int(v) for k, v in ref.options if k not in ("fps", "max_frames", "audio_start", "audio_end")}
    if ref.kind == "image":
        part.update(image=_pil(ref, where), **_budget(settings.image_min_pixels, settings.image_max_pixels), **sizes)
    elif ref.kind == "audio":
        if ref.data is None and ref.path is not None and settings.sampling_rate == QWEN_LOADER_RATE:
            if not os.path.exists(ref.path):
                raise _fail(ref, where, "missing")
            part.update(audio=ref.path, **dict(ref.options))
        else:
            samples = _trimmed(ref, _audio_array(ref, settings.sampling_rate, where), settings.sampling_rate)
            if len(samples) == 0:
                raise _fail(ref, where, "audio_start/audio_end leave no samples")
            part.update(audio=samples)
    else:
        frames, fps = _video_frames(ref, settings, where)
        part.update(
            video=frames,
            sample_fps=fps,
            **_budget(settings.video_min_pixels, settings.video_max_pixels),
            **sizes,
        )
    try:
        audios, images, videos, _ = process_mm_info(
            [{"role": "user", "content": [part]}],
            use_audio_in_video=False,
            return_video_kwargs=True,
            return_video_metadata=True,
            image_patch_size=settings.image_patch_size,
        )
    except Exception as exc:
        raise _fail(ref, where, exc) from exc
    if ref.kind == "image":
        return images[0]
    if ref.kind == "audio":
        return audios[0]
    return videos[0]


@dataclass(frozen=True)
class DecodedMedia:
    """A prompt's media in processor form, one list per kind (``None`` when it has none,
    as verl's agent loop expects)."""

    images: list[Any] | None
    videos: list[Any] | None
    audios: list[Any] | None


def decode_all(refs: tuple[MediaRef, ...], settings: MediaSettings, *, where: str) -> DecodedMedia:
    """Decode every medium of a prompt with :func:`decode` (the local engine's decoders):
    images as PIL, audio as float32 at ``settings.sampling_rate``, videos as
    ``(frames, metadata)``."""
    by_kind: dict[str, list[Any]] = {"image": [], "video": [], "audio": []}
    for ref in refs:
        by_kind[ref.kind].append(decode(ref, settings, where=where))
    return DecodedMedia(
        images=by_kind["image"] or None, videos=by_kind["video"] or None, audios=by_kind["audio"] or None
    )
