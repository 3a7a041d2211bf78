"""Frames of a time span of a video, sampled and sized as a Qwen-VL judge is shown them.

verl-omni's OmniVideo-R1 QI reward shows its judge each predicted segment through
``qwen_vl_utils.fetch_video({"video", "video_start", "video_end", "fps": 1.0, "min_frames": 2,
"max_frames": ...})``. Its readers need torchcodec (with a system FFmpeg), decord, or
``torchvision.io.read_video`` (gone from torchvision 0.28), so here the clip is decoded with
PyAV and the same arithmetic picks and sizes the frames:

- :func:`span_frame_range`: the span's first frame is ``ceil(start * fps)`` and its last
  ``floor(end * fps)`` (times clamped to the clip, the last frame at most the clip's last), at the
  stream's average frame rate; a span that holds fewer than two frames is a :class:`SpanError`;
- :func:`span_frame_count`: one frame a second of the span, at least ``min_frames``, at most
  ``max_frames`` and the span's frames, rounded down to an even count;
- the frames are spread evenly from the first to the last (``linspace``, rounded);
- :func:`frame_size`: each frame resized (bicubic, antialiased) so that both sides are
  multiples of 28 and its area lies between 128 and 768 of Qwen-VL's 28x28 tiles.

Frames are returned as JPEG bytes (quality 85), as verl-omni encodes them for its judge.
"""

from __future__ import annotations

import io
import math
import os
from typing import Any

TILE = 28
"""Qwen-VL's merged patch side (14-pixel patches, merged 2x2)."""
MIN_PIXELS = 128 * TILE * TILE
MAX_PIXELS = 768 * TILE * TILE
JPEG_QUALITY = 85


class SpanError(ValueError):
    """A span of the clip holds no frames to show (it starts past the end, or is too short)."""


def span_frame_range(start: float, end: float, total_frames: int, video_fps: float) -> tuple[int, int]:
    """The first and last frame index of ``start``-``end`` seconds.

    Raises:
        SpanError: the span's first frame is not before its last.
    """
    if video_fps <= 0 or total_frames <= 0:
        raise SpanError(f"the clip has no frames to show ({total_frames} frames at {video_fps} fps)")
    duration = total_frames / video_fps
    first = math.ceil(max(0.0, min(start, duration)) * video_fps)
    last = min(math.floor(max(0.0, min(end, duration)) * video_fps), total_frames - 1)
    if first >= last:
        raise SpanError(f"the span {start:g}-{end:g} s holds no two frames of a {duration:.2f} s clip "
                        f"({total_frames} frames at {video_fps:g} fps)")
    return first, last


def span_frame_count(span_frames: int, video_fps: float, *, fps: float = 1.0, min_frames: int = 2,
                     max_frames: int = 8) -> int:
    """How many frames of a span of ``span_frames`` frames the judge sees.

    Raises:
        SpanError: fewer than two frames would be shown.
    """
    low = 2 * math.ceil(min_frames / 2)
    high = 2 * math.floor(max_frames / 2)
    wanted = min(max(span_frames / video_fps * fps, low), high, span_frames)
    count = 2 * math.floor(wanted / 2)
    if not 2 <= count <= span_frames:
        raise SpanError(f"a span of {span_frames} frames cannot show {count} frames")
    return count


def frame_indices(first: int, last: int, count: int) -> list[int]:
    """``count`` frame indices spread evenly from ``first`` to ``last`` (torch's ``linspace``, rounded half to even)."""
    import torch

    return [int(i) for i in torch.linspace(first, last, count).round().long().tolist()]


def frame_size(height: int, width: int) -> tuple[int, int]:
    """The frame's height and width for the judge (see the module docstring)."""
    def nearest(value: float) -> int:
        return round(value / TILE) * TILE

    h, w = max(TILE, nearest(height)), max(TILE, nearest(width))
    if h * w > MAX_PIXELS:
        beta = math.sqrt(height * width / MAX_PIXELS)
        h, w = math.floor(height / beta / TILE) * TILE, math.floor(width / beta / TILE) * TILE
    elif h * w < MIN_PIXELS:
        beta = math.sqrt(MIN_PIXELS / (height * width))
        h, w = math.ceil(height * beta / TILE) * TILE, math.ceil(width * beta / TILE) * TILE
    return h, w


def span_frames(path: str, start: float, end: float, *, max_frames: int = 8) -> list[bytes]:
    """The JPEG frames of ``start``-``end`` seconds of the video at ``path``.

    Raises:
        FileNotFoundError: no file at ``path``.
        SpanError: the span holds too few frames (see :func:`span_frame_range`).
        ValueError: the file does not decode as a video.
    """
    if not path or not os.path.isfile(path):
        raise FileNotFoundError(f"the row's video is not there: {path!r} (extra_info.video_path)")
    import av

    try:
        with av.open(path) as container:
            stream = container.streams.video[0]
            video_fps = float(stream.average_rate or 0)
            total = int(stream.frames) or sum(1 for packet in container.demux(stream) if packet.size)
            container.seek(0)
            first, last = span_frame_range(start, end, total, video_fps)
            count = span_frame_count(last - first + 1, video_fps, max_frames=max(2, max_frames - max_frames % 2))
            wanted = frame_indices(first, last, count)
            picked: dict[int, Any] = {}
            for index, frame in enumerate(container.decode(stream)):
                if index in wanted:
                    picked[index] = frame.to_ndarray(format="rgb24")
                if index >= wanted[-1]:
                    break
    except (SpanError, FileNotFoundError):
        raise
    except Exception as exc:
        raise ValueError(f"{path} does not decode as a video: {type(exc).__name__}: {exc}") from exc
    missing = [index for index in wanted if index not in picked]
    if missing:
        raise SpanError(f"{path} decodes to fewer frames than its header's {total} (frames {missing} are missing)")
    return [_jpeg(picked[index]) for index in wanted]


def _jpeg(frame: Any) -> bytes:
    import torch
    from PIL import Image
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as tvf

    pixels = torch.from_numpy(frame).permute(2, 0, 1)
    height, width = frame_size(pixels.shape[1], pixels.shape[2])
    resized = tvf.resize(pixels, [height, width], interpolation=InterpolationMode.BICUBIC, antialias=True)
    buffer = io.BytesIO()
    Image.fromarray(resized.permute(1, 2, 0).contiguous().numpy()).save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()
