"""A LoRA actor built by verl's own FSDP2 engine from our translated config learns: its
adapter, gradients' target and AdamW state are fp32, and its forward computes in bf16.

``verl_lora_harness.py`` (a subprocess: verl chooses its device platform once per process)
builds the tiny Qwen3-Omni thinker's LoRA actor on CPU (gloo, one process) and runs one of
verl's optimizer steps at lr 3e-6. verl 0.9.1 casts the adapter to the base's dtype; with the
base loaded in bf16 (what we used to translate) the adapter is bf16 and the step moves under 1%
of ``lora_A``'s elements (about 0.06 in size: bf16 ulp 2**-12 = 2.4e-4, 80 times the step).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed --extra gpu)")

sys.path.insert(0, str(Path(__file__).parent))
from test_verl_cpu_harness import run_harness  # noqa: E402

pytestmark = pytest.mark.slow

HARNESS = Path(__file__).with_name("verl_lora_harness.py")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_harness(tmp_path_factory.mktemp("verl-lora"), harness=HARNESS)


def test_verl_builds_an_fp32_adapter_and_computes_in_bf16(report: dict[str, Any]) -> None:
    assert report["model_dtype"] == "fp32"
    assert report["trainable"] > 0 and report["trainable_are_lora"]
    assert report["trainable_dtypes"] == ["torch.float32"]
    assert report["optimizer_state_dtypes"] == ["torch.float32"]  # AdamW's moments
    # FSDP2's mixed precision (verl's default param_dtype) casts on unshard: bf16 compute.
    assert report["forward_weight_dtypes"] == {"base": "torch.bfloat16", "lora_A": "torch.bfloat16"}


def test_one_small_adamw_step_moves_every_adapter_weight(report: dict[str, Any]) -> None:
    assert report["lr"] == pytest.approx(3e-6)
    # Adam's first step is lr * g / (|g| + eps) = 3e-6 for every element (gradients of ones,
    # clipped to norm 1: each still ~1e-2, far above eps 1e-8).
    assert report["lora_a_mean_abs"] > 0.01
    assert report["lora_a_moved_fraction"] == 1.0
    assert report["lora_a_moved_max"] == pytest.approx(3e-6, rel=1e-2)  # up to fp32 rounding


def test_a_merged_lora_sync_sends_the_weights_the_actor_scores_with(report: dict[str, Any]) -> None:
    """The rollout of a LoRA run serves ``W + scaling * B @ A`` in the actor's fp32, as a full
    fine-tune's sync sends its weights (an fp32 vLLM-Omni rollout showed a -6.2e-4 log_ppl_diff
    after the first update when they came rounded to bf16), with MoE experts under vLLM's
    per-expert keys; the actor's own base weights are back as they were."""
    sync = report["merged_sync"]
    ours = sync["ours"]
    assert ours["missing"] == []
    assert ours["delta_norm"] > 1e-3  # the adapters change the weights
    assert ours["max_abs_diff"] <= 1e-6
    assert ours["dtypes"] == ["torch.float32"]
    assert ours["packed_expert_keys"] == [] and ours["per_expert_keys"] > 0
    assert sync["bases_restored"]


def test_verls_own_merged_lora_sync_still_rounds_to_bf16(report: dict[str, Any]) -> None:
    """Canary for ``OmniFSDPEngine._merged_lora_per_tensor_param``: verl 0.9.1's rounds each
    merged weight to bf16 and sends packed experts unsplit. When this fails, upstream has changed
    it: compare, and drop our override if theirs now sends what a full fine-tune sends."""
    verls = report["merged_sync"]["verls"]
    assert verls["missing"] == []
    assert "torch.bfloat16" in verls["dtypes"]
    assert verls["max_abs_diff"] > 1e-5
    assert verls["packed_expert_keys"] != []
