"""omni_data's RL dataset through the real (tiny) Qwen3-Omni processor.

Lives in the cross-package tests because omni_data may not import omni_qwen3. One parquet
holds text, image, audio, image+audio and video rows; every row goes through Qwen's media
loaders and transformers' Qwen3OmniMoeProcessor, and the token counts are checked against
the processor's own grids and feature lengths.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omni_data import DatasetConfig, RLDataset, rl_row, write_rl_parquet

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def qwen3_processor(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoProcessor

    from omni_qwen3.tiny import build_tiny_qwen3_omni

    checkpoint = build_tiny_qwen3_omni(tmp_path_factory.mktemp("tiny") / "qwen3-omni", seed=0)
    return AutoProcessor.from_pretrained(checkpoint)


def picture(width: int, height: int, seed: int) -> Any:
    from PIL import Image

    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8))


def png_bytes(width: int, height: int, seed: int) -> bytes:
    buffer = io.BytesIO()
    picture(width, height, seed).save(buffer, format="PNG")
    return buffer.getvalue()


def write_wav(path: Path, seconds: float, rate: int) -> str:
    import soundfile as sf

    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate)
    return str(path)


def write_mp4(path: Path, frames: int, fps: int, size: int) -> str:
    """mpeg4 through PyAV's bundled libav: no ffmpeg binary needed."""
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for i in range(frames):
            frame = np.asarray(picture(size, size, seed=100 + i))
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)


def row(text: str, index: int, **media: Any) -> dict[str, Any]:
    return rl_row(
        data_source="synthetic",
        messages=[{"role": "user", "content": text}],
        ground_truth=str(index),
        ability="test",
        extra_info={"split": "test", "index": index},
        **media,
    )


def write_modality_rows(root: Path) -> Path:
    """One RL parquet with a text, image, audio, image+audio and video row (in that order)."""
    image = {"bytes": png_bytes(96, 64, seed=1), "path": "a.png"}
    rows = [
        row("What is two plus two?", 0),
        row("<image>Describe the picture.", 1, images=[image]),
        row("<audio>What do you hear?", 2, audios=[write_wav(root / "tone.wav", 1.0, 16_000)]),
        row("<image><audio>Match them.", 3, images=[image], audios=[write_wav(root / "tone8k.wav", 2.0, 8_000)]),
        row("<video>What happens?", 4, videos=[write_mp4(root / "clip.mp4", frames=8, fps=4, size=64)]),
    ]
    return write_rl_parquet(rows, root / "mixed.parquet")


@pytest.fixture(scope="module")
def mixed_parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_modality_rows(tmp_path_factory.mktemp("media"))


def pad_count(processor: Any, ids: Any, token: str) -> int:
    return int((ids == processor.tokenizer.convert_tokens_to_ids(token)).sum())


def test_rows_of_every_modality_through_the_qwen3_omni_processor(qwen3_processor: Any, mixed_parquet: Path) -> None:
    processor = qwen3_processor
    dataset = RLDataset(mixed_parquet, processor, DatasetConfig(max_prompt_length=4096))
    assert (len(dataset), dict(dataset.report.dropped)) == (5, {})
    text, image, audio, both, video = (dataset[i] for i in range(5))
    merge = processor.image_processor.merge_size ** 2

    # Text: exactly the tokenizer's ids for the templated prompt, no multimodal tensors.
    templated = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": "What is two plus two?"}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    # (omni_data tokenizes text-only rows with the tokenizer directly; the processor agrees.)
    assert text["input_ids"].tolist() == processor(text=[templated], return_tensors="pt")["input_ids"][0].tolist()
    assert text["multi_modal_inputs"] == {}

    # Image 96x64 (already multiples of 32) -> grid (1, 4, 6) patches of 16 -> 24 / 4 = 6 pads.
    grid = image["multi_modal_inputs"]["image_grid_thw"]
    assert grid.tolist() == [[1, 4, 6]]
    assert image["multi_modal_inputs"]["pixel_values"].shape[0] == 24
    assert pad_count(processor, image["input_ids"], "<|image_pad|>") == 24 // merge

    # Audio: 1 s at 16 kHz -> 100 mel frames (hop 160). Qwen3-Omni's audio encoder turns
    # each full 100-frame block into 13 tokens (the remainder goes through three stride-2
    # convolutions; 0 left here) -> 13 audio pads.
    mm = audio["multi_modal_inputs"]
    assert int(mm["feature_attention_mask"].sum()) == 100
    assert mm["input_features"].shape[1] == processor.feature_extractor.feature_size
    assert pad_count(processor, audio["input_ids"], "<|audio_pad|>") == 13

    # Image + audio: 2 s at 8 kHz, resampled to 16 kHz -> 200 frames -> 2 blocks -> 26 pads.
    mm = both["multi_modal_inputs"]
    assert int(mm["feature_attention_mask"].sum()) == 200
    assert pad_count(processor, both["input_ids"], "<|audio_pad|>") == 26
    assert pad_count(processor, both["input_ids"], "<|image_pad|>") == 24 // merge

    # Video: 8 frames at 4 fps sampled at 2 fps -> 4 frames -> 2 temporal patches.
    grid = video["multi_modal_inputs"]["video_grid_thw"]
    assert int(grid[0, 0]) == 2
    assert pad_count(processor, video["input_ids"], "<|video_pad|>") == int(grid.prod()) // merge

    for i, item in enumerate((text, image, audio, both, video)):
        assert item["attention_mask"].tolist() == [1] * item["input_ids"].shape[0]
        assert item["reward_model"] == {"style": "rule", "ground_truth": str(i)}
        assert item["index"] == i


def test_overlong_filter_uses_the_real_prompt_length(qwen3_processor: Any, mixed_parquet: Path) -> None:
    full = RLDataset(mixed_parquet, qwen3_processor, DatasetConfig(max_prompt_length=4096))
    lengths = sorted(int(full[i]["input_ids"].shape[0]) for i in range(len(full)))
    budget = lengths[2]  # keeps the three shortest prompts
    dataset = RLDataset(mixed_parquet, qwen3_processor, DatasetConfig(max_prompt_length=budget))
    assert (dataset.report.kept, dict(dataset.report.dropped)) == (3, {"overlong_prompt": 2})
    assert dataset.report.longest_prompt == budget
