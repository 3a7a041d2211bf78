"""The logit mask our vLLM-Omni server sends to the policy stage at start-up (verl's
``monkey_patch_model``): the policy stage's own vocabulary and bans, for every pipeline mode.

A talker's logits are its codec vocabulary (3072 wide on the real checkpoint): the thinker's
media placeholders (>= 151643 there) lie past them -- verl's ``index_fill_`` with them is a
device-side assert on the first talker token -- and on the tiny model they fall inside, where
they would silently ban codec ids. The thinker's modes still ban every placeholder.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from omni_trainer.engines.verl.errors import EXTRAS_COMMAND

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(importlib.util.find_spec(name) for name in ("verl", "vllm", "vllm_omni")),
        reason=f"needs the extras ({EXTRAS_COMMAND})",
    ),
]
sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = ("thinker_only", "thinker_talker", "full", "talker")
REAL_SPECIAL_IDS = {
    "<|vision_start|>": 151652, "<|vision_end|>": 151653, "<|image_pad|>": 151655, "<|video_pad|>": 151656,
    "<|audio_start|>": 151669, "<|audio_end|>": 151670, "<|audio_pad|>": 151675,
}
"""Qwen3-Omni's tokenizer: its media tokens at their ids (its 33 special tokens are 151643-151675)."""


class RealTokenizer:
    """The real tokenizer as our processor reads it for placeholders: its media token strings,
    their ids, and its length (151643 BPE ids + 33 special tokens)."""

    image_token, video_token, audio_token = "<|image_pad|>", "<|video_pad|>", "<|audio_pad|>"
    vision_bos_token, vision_eos_token = "<|vision_start|>", "<|vision_end|>"
    audio_bos_token, audio_eos_token = "<|audio_start|>", "<|audio_end|>"
    unk_token_id = None

    def convert_tokens_to_ids(self, token: str) -> int:
        return REAL_SPECIAL_IDS[token]

    def __len__(self) -> int:
        return 151676


def real_config() -> Any:
    """Qwen3-Omni-30B-A3B's composite config as far as the mask reads it: the talker's codec
    vocabulary (3072) and control ids, code2wav's codebook (2048), from its config.json."""
    from transformers import Qwen3OmniMoeConfig

    return Qwen3OmniMoeConfig(
        talker_config={
            "text_config": {"vocab_size": 3072}, "codec_pad_id": 2148, "codec_bos_id": 2149,
            "codec_eos_token_id": 2150, "codec_nothink_id": 2155, "codec_think_bos_id": 2156,
            "codec_think_eos_id": 2157,
        },
        code2wav_config={"codebook_size": 2048},
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tiny checkpoint's config and processor (its tokenizer: a 4k BPE, special ids low)."""
    from transformers import AutoConfig

    from omni_qwen3.tiny import build_tiny_qwen3_omni
    from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter

    path = build_tiny_qwen3_omni(tmp_path_factory.mktemp("tiny") / "ckpt", seed=0)
    config = AutoConfig.from_pretrained(path)
    return config, Qwen3OmniThinkerAdapter().configure_processor(str(path), config)


def sent_mask(mode: str, hf_config: Any, processor: Any) -> tuple[list[int] | None, int, list[int]]:
    """``(stage_ids, vocab_size, banned_token_ids)`` of the one ``monkey_patch_model`` call our
    server makes at start-up, recorded on the ``AsyncOmni`` stand-in."""
    from omni_rollout.vllm_omni.testing import RecordingAsyncOmni
    from verl_server_stub import stub_server

    omni = RecordingAsyncOmni([None, None, None])
    server = stub_server(omni, mode=mode)
    server.model_config.hf_config, server.model_config.tokenizer = hf_config, processor.tokenizer
    server.processor = processor
    asyncio.run(server.mask_policy_logits(server.engine))
    (call,) = [call for name, call in omni.calls if name == "collective_rpc"]
    assert call["method"] == "monkey_patch_model"
    return call["stage_ids"], call["kwargs"]["vocab_size"], call["kwargs"]["banned_token_ids"]


@pytest.mark.parametrize("mode", MODES)
def test_the_real_checkpoints_policy_stage_gets_its_own_bans(mode: str) -> None:
    processor = SimpleNamespace(tokenizer=RealTokenizer())
    placeholders = set(REAL_SPECIAL_IDS.values())
    stage_ids, vocab, banned = sent_mask(mode, real_config(), processor)
    if mode != "talker":
        assert stage_ids == [0] and vocab == 151676 and placeholders <= set(banned)
        return
    assert stage_ids == [1] and vocab == 3072
    assert all(0 <= i < 3072 for i in banned) and not placeholders & set(banned)
    # The talker's own: ids past the 2048-code codebook (its controls 2148..2157 among them)
    # but the end of speech, 2150 -- what its actor suppresses, and vLLM-Omni's talker too.
    assert set(banned) == set(range(2048, 3072)) - {2150}


@pytest.mark.parametrize("mode", MODES)
def test_the_tiny_models_talker_keeps_its_codec_ids(tiny: Any, mode: str) -> None:
    from omni_qwen3.talker_policy import suppressed_codec_ids
    from omni_rollout.placeholders import placeholder_token_ids

    config, processor = tiny
    placeholders = set(placeholder_token_ids(processor))
    codec_vocab = config.talker_config.text_config.vocab_size
    stage_ids, vocab, banned = sent_mask(mode, config, processor)
    if mode != "talker":
        assert stage_ids == [0] and vocab == len(processor.tokenizer) and placeholders <= set(banned)
        return
    assert placeholders & set(range(codec_vocab))  # the tiny placeholders are codec ids too: why it matters
    assert stage_ids == [1] and vocab == codec_vocab
    assert all(0 <= i < codec_vocab for i in banned) and not placeholders & set(banned)
    assert banned == suppressed_codec_ids(config)
