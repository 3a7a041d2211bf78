"""Which frames of a video file we sample, against Qwen's own loader (``qwen_omni_utils``'s
``fetch_video``, as verl-omni's dataset calls it with the row's video entry).

Qwen's file readers (torchcodec, decord, torchvision) all count the file's frames, ask
``smart_nframes`` how many to take, and take ``torch.linspace(0, total - 1, n).round()`` of
them at ``n / total * native fps``. Its readers cannot decode here (torchcodec finds no FFmpeg
libraries), so ``smart_nframes`` itself is the reference for the count and the rest is its
readers' rule. Across clip lengths, file frame rates and the entry's ``fps``, ``min_frames`` and
``max_frames``, the frames we decode are those frames of the file (read back by marking each
frame), as many, at that rate; a clip too short to sample is a bad row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omni_data import MediaError, parse_row, rl_row, settings_from_processor
from omni_data.media import decode, frame_indices
from omni_data.rows import MediaRef

SIZE = 56
CASES = {
    # name: (frames in the file, its rate, the entry's options)
    "1 s at 4 fps, defaults": (4, 4, {}),
    "1 s at 25 fps, 2 fps": (25, 25, {"fps": 2.0}),
    "3 s at 10 fps, 1 fps (min_frames lifts it)": (30, 10, {"fps": 1.0}),
    "3 s at 10 fps, 1 fps, min_frames 2": (30, 10, {"fps": 1.0, "min_frames": 2}),
    "3 s at 10 fps, min_frames 7 (rounded up to 8)": (30, 10, {"fps": 1.0, "min_frames": 7}),
    "12 s at 5 fps, 2 fps, max_frames 8 (spread over the clip)": (60, 5, {"fps": 2.0, "max_frames": 8}),
    "12 s at 5 fps, 2 fps, max_frames 9 (rounded down to 8)": (60, 5, {"fps": 2.0, "max_frames": 9}),
    "8 s at 24 fps, 2 fps, max_frames 32": (192, 24, {"fps": 2.0, "max_frames": 32}),
    "7 s at 3 fps, 2 fps": (21, 3, {"fps": 2.0}),
    "2 frames only": (2, 2, {"fps": 2.0}),
}


def marked_clip(path: Path, frames: int, fps: int) -> str:
    """An mp4 whose frame i is a flat grey of level 8 * i (mod 256), so a sampled frame tells its index."""
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width = stream.height = SIZE
        stream.pix_fmt = "yuv420p"
        stream.bit_rate = 20_000_000  # near-lossless: each frame keeps its grey level
        for i in range(frames):
            picture = np.full((SIZE, SIZE, 3), (8 * i) % 256, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)


def qwen_plan(entry: dict[str, Any], total: int, native: float) -> tuple[list[int], float]:
    """The frames Qwen's readers take from a file of ``total`` frames at ``native`` fps, and their rate."""
    import torch
    from qwen_omni_utils.v2_5.vision_process import smart_nframes  # type: ignore[import-untyped]

    count = smart_nframes(entry, total_frames=total, video_fps=native)
    return torch.linspace(0, total - 1, count).round().long().tolist(), count / total * native


def levels(video: Any) -> list[int]:
    """Each frame's index, read back from its grey level."""
    return [int(round(float(frame.float().mean()) / 8)) for frame in video]


def entry_ref(path: str, options: dict[str, float]) -> MediaRef:
    row = rl_row(data_source="s", messages=[{"role": "user", "content": "<video>?"}], ground_truth="1",
                 ability="t", extra_info={"index": 0}, videos=[{"video": path, **options}])
    (ref,) = parse_row(row, where="row 0").media
    return ref


@pytest.mark.parametrize("case", CASES)
def test_the_sampled_frames_are_qwens(case: str, tmp_path: Path) -> None:
    frames, rate, options = CASES[case]
    path = marked_clip(tmp_path / "clip.mp4", frames, rate)
    indices, their_fps = qwen_plan({"video": path, **options}, frames, float(rate))
    settings = settings_from_processor(None, video_max_frames=768)  # Qwen's own cap when the entry gives none
    ref = entry_ref(path, options)
    assert frame_indices(frames, float(rate), ref, settings) == indices
    ours, metadata = decode(ref, settings, where="row 0")
    assert levels(ours) == [i % 32 for i in indices]
    assert metadata["fps"] == pytest.approx(their_fps)  # the rate the frames were taken at


def test_a_clip_with_one_frame_is_a_bad_video(tmp_path: Path) -> None:
    path = marked_clip(tmp_path / "one.mp4", 1, 2)
    with pytest.raises(MediaError) as info:
        decode(entry_ref(path, {}), settings_from_processor(None), where="row 0")
    assert info.value.reason == "bad_video" and "at least 2 are needed" in str(info.value)


def test_an_entrys_pixel_budget_overrides_the_processors(tmp_path: Path) -> None:
    """verl-omni's NExT-QA rows set min_pixels/max_pixels on each video, and Qwen's processors
    set their own budget: the entry's wins, as in Qwen's loader (both used to reach the loader,
    which raised)."""
    path = marked_clip(tmp_path / "clip.mp4", 8, 4)
    budget = settings_from_processor(None)
    budget = type(budget)(**{**budget.__dict__, "video_min_pixels": 64 * 28 * 28, "video_max_pixels": 512 * 28 * 28})
    small, _ = decode(entry_ref(path, {"min_pixels": 4 * 28 * 28, "max_pixels": 4 * 28 * 28}), budget, where="row 0")
    large, _ = decode(entry_ref(path, {}), budget, where="row 0")
    assert small.shape[-2] * small.shape[-1] <= 4 * 28 * 28 < large.shape[-2] * large.shape[-1]
