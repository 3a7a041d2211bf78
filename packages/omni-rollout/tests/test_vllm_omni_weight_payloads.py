"""Staging sync payloads on disk in the formats vLLM reads (PEFT dir, safetensors file)."""

from __future__ import annotations

import enum
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from omni_rollout.vllm_omni import (
    FullWeights,
    LoraWeights,
    PayloadError,
    stage_full,
    stage_lora,
)


class TaskType(str, enum.Enum):
    CAUSAL_LM = "CAUSAL_LM"


def test_lora_is_written_as_a_peft_adapter_directory(tmp_path: Path) -> None:
    a = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    weights = LoraWeights(
        tensors={"base_model.model.q_proj.lora_A.weight": a.t().t(),  # a non-owning view
                 "base_model.model.q_proj.lora_B.weight": torch.zeros(4, 2)},
        config={"r": 2, "lora_alpha": 4, "target_modules": {"v_proj", "q_proj"},
                "task_type": TaskType.CAUSAL_LM},
    )
    target = stage_lora(weights, tmp_path / "v1")
    config = json.loads((target / "adapter_config.json").read_text())
    # Sets become sorted lists and enums their values, so vLLM's PEFTHelper can read it.
    assert config == {"r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"],
                      "task_type": "CAUSAL_LM"}
    loaded = load_file(str(target / "adapter_model.safetensors"))
    assert torch.equal(loaded["base_model.model.q_proj.lora_A.weight"], a)


def test_lora_refuses_base_weights_and_incomplete_configs(tmp_path: Path) -> None:
    base = LoraWeights({"model.q_proj.weight": torch.ones(2)}, {"r": 2, "target_modules": []})
    with pytest.raises(PayloadError, match=r"non-LoRA tensors \['model.q_proj.weight'\]"):
        stage_lora(base, tmp_path)
    no_rank = LoraWeights({"x.lora_A.weight": torch.ones(2)}, {"lora_alpha": 4})
    with pytest.raises(PayloadError, match=r"lacks \['r', 'target_modules'\]"):
        stage_lora(no_rank, tmp_path)


def test_full_weights_accept_pairs_and_refuse_duplicates_or_nothing(tmp_path: Path) -> None:
    tied = torch.ones(3)
    # Two names for one storage (tied weights) are saved as separate copies.
    pairs = [("thinker.lm_head.weight", tied), ("thinker.model.embed_tokens.weight", tied)]
    target = stage_full(FullWeights(pairs), tmp_path / "full")
    assert sorted(load_file(str(target / "model.safetensors"))) == [
        "thinker.lm_head.weight", "thinker.model.embed_tokens.weight"]
    with pytest.raises(PayloadError, match="names tensor 'a' twice"):
        stage_full(FullWeights([("a", tied), ("a", tied)]), tmp_path / "dup")
    with pytest.raises(PayloadError, match="holds no tensors"):
        stage_full(FullWeights({}), tmp_path / "empty")
