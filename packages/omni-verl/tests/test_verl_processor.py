"""The adapter's processor inside verl's processes, on the tiny Qwen3-Omni (CPU).

Covers issue 14's defects 2-5 at unit level (the end-to-end proof is
``test_verl_cpu_harness.py``): verl's own processor loader gives up on Qwen3-Omni; our
dataset class decodes a rollout prompt's media as the local engine does; the processor
gives verl's rope hook the audio lengths; every placeholder is banned from sampling.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed --extra gpu)")

pytestmark = pytest.mark.slow
TESTS = Path(__file__).resolve().parents[3] / "tests"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    return str(build_tiny_qwen3_omni(tmp_path_factory.mktemp("tiny") / "ckpt", seed=0))


@pytest.fixture()
def settings(tiny: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    from omni_verl.settings import SETTINGS_ENV, VerlSettings

    value = VerlSettings(model_path=tiny)
    monkeypatch.setenv(SETTINGS_ENV, value.to_env())
    return value


def test_verls_own_processor_loader_returns_none_for_qwen3_omni(tiny: str) -> None:
    """Why our processor must be installed: verl's ``hf_processor`` does not know
    Qwen3-Omni's processor and returns None (no media, 1-D positions). If this starts
    failing, verl learned the model; re-check whether the override is still needed."""
    from verl.utils import hf_processor

    with pytest.warns(UserWarning, match="Failed to create processor"):
        assert hf_processor(tiny) is None


def test_banned_tokens_cover_audio_and_video_as_well_as_images(settings: Any) -> None:
    from verl.workers.rollout.utils import get_vision_placeholder_token_ids

    from omni_rollout.placeholders import banned_token_ids
    from omni_verl.processor import adapter_processor

    processor = adapter_processor(settings)
    tokenizer = processor.tokenizer
    pads = {tokenizer.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|video_pad|>", "<|audio_pad|>")}
    banned = set(banned_token_ids(processor))
    assert pads <= banned
    assert tokenizer.convert_tokens_to_ids("<|audio_pad|>") not in get_vision_placeholder_token_ids(processor)
    assert tokenizer.eos_token_id not in banned and tokenizer.convert_tokens_to_ids("<|im_end|>") not in banned
    assert banned_token_ids(None) == []


def test_rope_index_kwargs_carry_the_audio_lengths(settings: Any) -> None:
    import torch

    from omni_verl.processor import adapter_processor

    processor = adapter_processor(settings)
    mask = torch.tensor([[1] * 100 + [0] * 100, [1] * 200])
    kwargs = processor.get_rope_index_kwargs({"feature_attention_mask": mask})
    assert kwargs["audio_seqlens"].tolist() == [100, 200]
    assert kwargs["use_audio_in_video"] is False and kwargs["second_per_grids"] is None
    assert processor.get_rope_index_kwargs({})["audio_seqlens"] is None


def test_dataset_class_decodes_rollout_media_like_the_local_engine(settings: Any, tmp_path: Path) -> None:
    sys.path.insert(0, str(TESTS))
    from test_data_qwen3_processor import png_bytes, write_wav

    from omni_data import MediaRef, decode_all, settings_from_processor
    from omni_verl.dataset import OmniRLHFDataset
    from omni_verl.processor import adapter_processor

    wav = write_wav(tmp_path / "tone8k.wav", 1.0, 8_000)  # resampled to the processor's 16 kHz
    image = {"bytes": png_bytes(64, 32, seed=3), "path": "x.png"}
    messages = [{"role": "user", "content": [
        {"type": "image", "image": image}, {"type": "audio", "audio": wav}, {"type": "text", "text": "Both?"},
    ]}]
    images, videos, audios = asyncio.run(OmniRLHFDataset.process_multi_modal_info(messages, 16, None))
    assert videos is None and len(images) == 1 and len(audios) == 1
    assert audios[0].dtype == np.float32 and audios[0].shape == (16_000,)

    media_settings = settings_from_processor(adapter_processor(settings))
    local = decode_all((MediaRef("image", path="x.png", data=image["bytes"]), MediaRef("audio", path=wav)),
                       media_settings, where="test")
    assert np.array_equal(np.asarray(images[0]), np.asarray(local.images[0]))
    assert np.array_equal(audios[0], local.audios[0])

    # The text-only prompt has no media at all (verl then builds no multimodal inputs).
    assert asyncio.run(OmniRLHFDataset.process_multi_modal_info([{"role": "user", "content": "Hi"}])) == (None, None, None)
    only_images = asyncio.run(OmniRLHFDataset.process_vision_info(messages))
    assert len(only_images) == 2 and only_images[1] is None
