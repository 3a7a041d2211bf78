"""Decoding one medium for the processor, through Qwen's official loaders.

Every medium is handed to ``qwen_omni_utils.process_mm_info`` one at a time, so a failure
names the medium (and the row) instead of "something in this conversation". Before that:

- images from bytes are opened with PIL (the loader takes paths or PIL images);
- audio from bytes, or at a rate other than the loader's fixed 16 kHz, is decoded with
  soundfile and resampled with librosa, then passed as an array. WAV/FLAC need no ffmpeg;
- videos given as a file are decoded with PyAV (bundled libav, no ffmpeg binary) and
  sampled at ``fps``; videos given as frame images are used as they are;
- a video's soundtrack (``use_audio_in_video``, or an audio entry naming a video file, as
  ``soundtrack_as_audio`` writes one: :func:`soundtrack`) is decoded with PyAV, mixed to mono
  and resampled with librosa, as Qwen's loader (``librosa.load``) does.

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


QWEN_FRAME_FACTOR = 2
"""Qwen's loader samples an even number of frames (the vision encoder's temporal patch)."""
QWEN_MIN_FRAMES = 4
"""Qwen's loader's ``min_frames`` when an entry gives none (``FPS_MIN_FRAMES``)."""


def frame_indices(total: int, native_fps: float, ref: MediaRef, settings: MediaSettings) -> list[int]:
    """Which of a video file's ``total`` frames (decoded at ``native_fps``) are sampled, as
    Qwen's loader chooses them (``smart_nframes``, then frames spread evenly over the whole
    clip): about ``fps`` a second, at least ``min_frames`` and at most ``max_frames`` (the
    entry's, else the settings'), an even number, never more than the clip has.

    Raises:
        ValueError: the clip has fewer than two frames to sample.
    """
    import math

    fps = ref.option("fps") or settings.video_fps
    factor = QWEN_FRAME_FACTOR
    least = math.ceil((ref.option("min_frames") or QWEN_MIN_FRAMES) / factor) * factor
    most = math.floor(int(ref.option("max_frames") or settings.video_max_frames) / factor) * factor
    count = math.floor(min(max(total / native_fps * fps, least), most, total) / factor) * factor
    if count < factor:
        raise ValueError(f"the video has {total} frame(s); at least {factor} are needed")
    import torch

    indices: list[int] = torch.linspace(0, total - 1, count).round().long().tolist()  # as Qwen's loader rounds
    return indices


def _frame_count(container: Any, stream: Any) -> int:
    """The video stream's frames: its header's count, else its packets counted (no decoding)."""
    if stream.frames:
        return int(stream.frames)
    count = sum(1 for packet in container.demux(stream) if packet.size)
    container.seek(0)
    return count


def _video_frames(ref: MediaRef, settings: MediaSettings, where: str) -> tuple[list[Any], float]:
    """Frames (PIL) and their sampling rate (frames per second of the clip), sampled as
    :func:`frame_indices` chooses (Qwen's loader's rate: frames taken over frames the clip
    has, times its own rate); a video given as frame images is taken whole at the entry's ``fps``."""
    fps = ref.option("fps") or settings.video_fps
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
            total = _frame_count(container, stream)
            wanted = frame_indices(total, native, ref, settings)
            # Decode in order and keep the chosen frames, so a long video never sits in memory.
            keep = iter(wanted)
            target = next(keep)
            for index, frame in enumerate(container.decode(stream)):
                while index == target:
                    sampled.append(frame.to_image())
                    target = next(keep, -1)
                if target < 0:
                    break
    except Exception as exc:
        raise _fail(ref, where, exc) from exc
    if len(sampled) != len(wanted):
        raise _fail(ref, where, f"the file decodes to fewer frames than its {total} ({len(sampled)} of {len(wanted)} "
                                "sampled)")
    return sampled, len(wanted) / total * native


VIDEO_CONTAINERS = (".mp4", ".m4v", ".mkv", ".webm", ".mov", ".avi", ".flv", ".mpg", ".mpeg", ".ts")
"""File suffixes of video containers: an audio entry naming such a file means its audio stream
(:func:`soundtrack`; a video's soundtrack given as an audio item of its own)."""
SOUNDTRACK_SWITCHES = "data.use_audio_in_video or data.soundtrack_as_audio"


def soundtrack(ref: MediaRef, settings: MediaSettings, *, where: str) -> Any:
    """A video file's audio track as float32 mono at ``settings.sampling_rate``: what
    ``use_audio_in_video`` interleaves with the video's frames, and what an audio entry naming
    a video file (:data:`VIDEO_CONTAINERS`) holds.

    The track is taken whole, as Qwen's loader takes it: the frames span the whole clip
    (:func:`frame_indices`), and a track longer or shorter than the frames is the processor's
    to lay out (it appends whichever tokens are left).

    Raises:
        MediaError: reason ``no_soundtrack`` for a video without an audio stream or given as
            frame images (which carry no sound), ``missing_file``, or ``bad_video``.
    """
    if ref.frames is not None:
        raise MediaError(
            f"{where}: the video is a list of frame images, which has no soundtrack to hear ({SOUNDTRACK_SWITCHES} "
            "is on). Give the video file, or turn the switch off.", reason="no_soundtrack")
    if ref.path is None or not os.path.exists(ref.path):
        raise _fail(ref, where, "missing")
    import av
    import numpy as np

    try:
        with av.open(ref.path) as container:
            if not container.streams.audio:
                raise MediaError(
                    f"{where}: the video {ref.path} has no audio stream to hear ({SOUNDTRACK_SWITCHES} is on). "
                    "Leave the row out (data.on_bad_row=skip counts it), or turn the switch off.",
                    reason="no_soundtrack")
            stream = container.streams.audio[0]
            native = int(stream.rate or stream.codec_context.sample_rate)
            # The decoder returns whole codec frames; the stream's duration says where the sound
            # ends (an AAC track's last frame is padded), as ffmpeg's own decoding trims it.
            duration, time_base = stream.duration, stream.time_base
            length = None if duration is None or time_base is None else int(round(float(duration * time_base) * native))
            chunks = [frame.to_ndarray().reshape(frame.layout.nb_channels, -1) if frame.format.is_planar
                      else frame.to_ndarray().reshape(-1, frame.layout.nb_channels).T
                      for frame in container.decode(stream)]
    except MediaError:
        raise
    except Exception as exc:
        raise _fail(ref, where, exc) from exc
    if not chunks:
        raise MediaError(f"{where}: the audio stream of {ref.path} holds no samples.", reason="no_soundtrack")
    mono = np.concatenate([_as_float(chunk) for chunk in chunks], axis=1).mean(axis=0)[:length]
    if native != settings.sampling_rate:
        import librosa

        mono = librosa.resample(mono, orig_sr=native, target_sr=settings.sampling_rate)
    return np.ascontiguousarray(mono, dtype=np.float32)


def _as_float(samples: Any) -> Any:
    """Decoded samples as float32 in [-1, 1] (integer formats scaled as librosa scales them)."""
    import numpy as np

    if np.issubdtype(samples.dtype, np.integer):
        return samples.astype(np.float32) / float(np.iinfo(samples.dtype).max + 1)
    return samples.astype(np.float32)


def decode(ref: MediaRef, settings: MediaSettings, *, where: str) -> Any:
    """One medium in the form the processor takes: a PIL image, a float32 audio array at
    ``settings.sampling_rate``, or ``(video tensor [T, C, H, W], metadata)``.

    Raises:
        MediaError: naming ``where`` and the file (reason ``missing_file`` or ``bad_<kind>``).
    """
    from qwen_omni_utils import process_mm_info  # type: ignore[import-untyped]

    part: dict[str, Any] = {"type": ref.kind}
    # The entry's own settings (pixel budgets, fixed sizes) override the processor's, as in
    # Qwen's loaders; fps, min/max_frames and audio_start/audio_end are applied here.
    sizes = {k: int(v) for k, v in ref.options
             if k not in ("fps", "min_frames", "max_frames", "audio_start", "audio_end")}
    if ref.kind == "image":
        part.update({**_budget(settings.image_min_pixels, settings.image_max_pixels), **sizes},
                    image=_pil(ref, where))
    elif ref.kind == "audio" and ref.data is None and (ref.path or "").lower().endswith(VIDEO_CONTAINERS):
        samples = _trimmed(ref, soundtrack(ref, settings, where=where), settings.sampling_rate)
        if len(samples) == 0:
            raise _fail(ref, where, "audio_start/audio_end leave no samples")
        part.update(audio=samples)
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
        part.update({**_budget(settings.video_min_pixels, settings.video_max_pixels), **sizes},
                    video=frames, sample_fps=fps)
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


def decode_all(refs: tuple[MediaRef, ...], settings: MediaSettings, *, where: str,
               use_audio_in_video: bool = False) -> DecodedMedia:
    """Decode every medium of a prompt with :func:`decode` (the local engine's decoders):
    images as PIL, audio as float32 at ``settings.sampling_rate``, videos as
    ``(frames, metadata)``. ``use_audio_in_video``: each video's :func:`soundtrack` joins the
    audios where the video is, in the prompt's order of media (the order the processor
    interleaves them in).

    Raises:
        MediaError: see :func:`decode` and :func:`soundtrack`.
    """
    by_kind: dict[str, list[Any]] = {"image": [], "video": [], "audio": []}
    for ref in refs:
        by_kind[ref.kind].append(decode(ref, settings, where=where))
        if use_audio_in_video and ref.kind == "video":
            by_kind["audio"].append(soundtrack(ref, settings, where=where))
    return DecodedMedia(
        images=by_kind["image"] or None, videos=by_kind["video"] or None, audios=by_kind["audio"] or None
    )
