"""Synthetic media and a small stand-in processor for omni-data's own tests.

The stand-in mimics a transformers multimodal processor's interface (chat template, call
with text/images/audio/videos) and records what it received, so dataset tests can check
decoding without importing transformers. The real Qwen3-Omni processor is exercised in
``tests/test_data_qwen3_processor.py`` at the repository root.
"""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest


class Media:
    """Factories for synthetic media files and bytes."""

    @staticmethod
    def picture(width: int = 64, height: int = 48, seed: int = 0) -> Any:
        from PIL import Image

        pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
        return Image.fromarray(pixels)

    @staticmethod
    def image_bytes(fmt: str = "PNG", **kwargs: Any) -> bytes:
        buffer = io.BytesIO()
        Media.picture(**kwargs).save(buffer, format=fmt)
        return buffer.getvalue()

    @staticmethod
    def truncated_jpeg() -> bytes:
        """JPEG bytes whose header is intact but whose pixel data is cut short: PIL opens
        them, only a full decode fails."""
        whole = Media.image_bytes("JPEG", width=96, height=96)
        return whole[: len(whole) // 2]

    @staticmethod
    def tone(seconds: float = 1.0, rate: int = 16_000, hz: float = 440.0) -> np.ndarray:
        t = np.arange(int(seconds * rate)) / rate
        return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)

    @staticmethod
    def wav(path: Path, seconds: float = 1.0, rate: int = 16_000) -> Path:
        import soundfile as sf

        path.parent.mkdir(parents=True, exist_ok=True)
        sf.write(path, Media.tone(seconds, rate), rate)
        return path

    @staticmethod
    def mp4(path: Path, frames: int = 8, fps: int = 4, width: int = 64, height: int = 48) -> Path:
        """A short mpeg4 video written with PyAV (bundled libav; no ffmpeg binary)."""
        import av

        path.parent.mkdir(parents=True, exist_ok=True)
        with av.open(str(path), "w") as container:
            stream = container.add_stream("mpeg4", rate=fps)
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            for i in range(frames):
                array = np.full((height, width, 3), (i * 30) % 256, dtype=np.uint8)
                for packet in stream.encode(av.VideoFrame.from_ndarray(array, format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        return path


@pytest.fixture(scope="session")
def media() -> type[Media]:
    return Media


class FakeProcessor:
    """Interface of a transformers multimodal processor; one token per word, plus one per
    32x32 patch of each image/frame and one per 0.1 s of audio."""

    def __init__(self, sampling_rate: int = 16_000) -> None:
        budget = {"shortest_edge": 32 * 32, "longest_edge": 128 * 128}
        self.feature_extractor = SimpleNamespace(sampling_rate=sampling_rate)
        self.image_processor = SimpleNamespace(patch_size=16, size=budget)
        self.video_processor = SimpleNamespace(patch_size=16, size=budget)
        self.calls: list[dict[str, Any]] = []

    def apply_chat_template(
        self, messages: list[dict[str, Any]], *, add_generation_prompt: bool, tokenize: bool
    ) -> str:
        assert tokenize is False and add_generation_prompt is True
        out = []
        for message in messages:
            content = message["content"]
            if isinstance(content, list):
                content = " ".join(p["text"] if p["type"] == "text" else f"<{p['type'].upper()}>" for p in content)
            out.append(f"{message['role']}: {content}")
        return "\n".join(out) + "\nassistant:"

    def __call__(self, *, text: list[str], return_tensors: str, **kwargs: Any) -> dict[str, Any]:
        import torch

        self.calls.append({"text": text, **kwargs})
        length = len(text[0].split())
        out: dict[str, Any] = {}
        if "images" in kwargs:
            length += sum((im.width // 32) * (im.height // 32) for im in kwargs["images"])
            out["pixel_values"] = torch.zeros(len(kwargs["images"]), 4)
        if "audio" in kwargs:
            length += sum(len(a) * 10 // self.feature_extractor.sampling_rate for a in kwargs["audio"])
            out["input_features"] = torch.zeros(len(kwargs["audio"]), 8)
        if "videos" in kwargs:
            length += sum(int(v.shape[0]) for v in kwargs["videos"])
            out["pixel_values_videos"] = torch.zeros(len(kwargs["videos"]), 4)
        out["input_ids"] = torch.arange(length).unsqueeze(0)
        out["attention_mask"] = torch.ones(1, length, dtype=torch.long)
        return out


@pytest.fixture
def fake_processor() -> FakeProcessor:
    return FakeProcessor()


@pytest.fixture
def fake_processor_8k() -> FakeProcessor:
    return FakeProcessor(sampling_rate=8_000)
