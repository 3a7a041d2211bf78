from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3-Omni checkpoint, built once for the session."""
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    return build_tiny_qwen3_omni(tmp_path_factory.mktemp("tiny") / "qwen3-omni", seed=0)


@pytest.fixture(scope="session")
def tiny_config(tiny_path: Path) -> Any:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(tiny_path)


@pytest.fixture
def policy_model(tiny_path: Path) -> Any:
    """A fresh thinker policy, as the engines load it; tests may mutate it."""
    from omni_qwen3.thinker_policy import Qwen3OmniThinkerPolicy

    return Qwen3OmniThinkerPolicy.from_pretrained(tiny_path).eval()


@pytest.fixture
def full_model(tiny_path: Path) -> Any:
    """A fresh full model (thinker, talker, code2wav); tests may mutate it."""
    from transformers import Qwen3OmniMoeForConditionalGeneration

    return Qwen3OmniMoeForConditionalGeneration.from_pretrained(tiny_path).eval()


def tone(seconds: float, hz: float = 440.0, rate: int = 16_000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def picture(size: int = 64, seed: int = 0) -> Any:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


@pytest.fixture(scope="session")
def media() -> Any:
    """Factories for synthetic media: ``media.tone(seconds)`` and ``media.picture()``."""

    class Media:
        pass

    factories = Media()
    factories.tone = tone  # type: ignore[attr-defined]
    factories.picture = picture  # type: ignore[attr-defined]
    return factories
