from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from omni_contracts import ExtraFieldSpec, TrainingAdapter


def verl_module(name: str) -> ModuleType:
    """A module of verl's (the ``distributed`` extra), the reference a parity test compares with.

    Missing verl skips locally but fails in CI, where .ci/run installs the extra.
    """
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"verl is required for the parity tests in CI (uv sync --extra distributed): {exc}")
        pytest.skip(f"verl is not installed (uv sync --extra distributed): {exc}")


@pytest.fixture(scope="session")
def verl_core_algos() -> ModuleType:
    """verl's reference implementations of the losses and estimators."""
    return verl_module("verl.trainer.ppo.core_algos")


@pytest.fixture(scope="session")
def verl_rollout_corr() -> ModuleType:
    """verl's rollout correction (importance weights, rejection, their metrics)."""
    return verl_module("verl.trainer.ppo.rollout_corr_helper")


# --- a tiny causal LM built offline, and a training adapter for it ------------------------

VOCAB = 48


class TinyLMAdapter(TrainingAdapter):
    """A training adapter for a plain Qwen2 causal LM (no stages to strip)."""

    auto_model_class = "AutoModelForCausalLM"
    lora_target_modules = ("q_proj", "k_proj", "v_proj", "o_proj")

    def get_strip_modules(self, model_config: Any) -> Sequence[str]:
        return ()

    def configure_processor(self, model_path: str, model_config: Any) -> Any:
        raise NotImplementedError("the tiny LM has no processor")

    def configure_tokenizer(self, model_path: str, model_config: Any) -> Any:
        raise NotImplementedError("the tiny LM has no tokenizer")


class TinyLMWithExtraField(TinyLMAdapter):
    extra_field_specs = {"tiny.trace": ExtraFieldSpec("tiny.trace", ("response_length",))}


@pytest.fixture(scope="session")
def tiny_lm_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        tie_word_embeddings=False, pad_token_id=0, eos_token_id=1, bos_token_id=None,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-lm")
    Qwen2ForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture
def tiny_adapter() -> TinyLMAdapter:
    return TinyLMAdapter()


@pytest.fixture
def tiny_adapter_with_extra_field() -> TinyLMWithExtraField:
    return TinyLMWithExtraField()
