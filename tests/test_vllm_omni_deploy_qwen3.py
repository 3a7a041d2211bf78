"""Golden deploy configs for Qwen3-Omni's four pipeline modes (three vLLM-Omni pipelines).

The goldens live in packages/omni-rollout/tests/golden/. A change to the generated config
shows up as a failing diff; when the change is intended, regenerate them explicitly:

    uv run --frozen python tests/test_vllm_omni_deploy_qwen3.py --regenerate

and review the diff before committing. Tests never write them.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from omni_contracts import get_rollout_adapter
from omni_rollout.vllm_omni.deploy_config import (
    DeployConfigError,
    DeployOptions,
    build_deploy_config,
    render_deploy_config,
)
from omni_rollout.vllm_omni.devices import ReplicaLayout

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "packages/omni-rollout/tests/golden"
MODES = ("thinker_only", "thinker_talker", "full", "talker")

# Replica 1 of 2 on a 4-GPU node, 2 GPUs each, thinker at TP 1: the thinker takes
# device 2, talker and code2wav the replica's other device 3. The audio recipe's knobs.
LAYOUT = ReplicaLayout(replica_rank=1, num_replicas=2, gpus_per_replica=2, num_visible_devices=4)
OPTIONS = DeployOptions(
    gpu_memory_utilization=0.7,
    max_num_seqs=256,
    max_model_len=4160 + 2048,
    cudagraph_capture_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    enable_lora=True,
    max_lora_rank=32,
)


# The talker as the policy: vLLM-Omni 0.28 serves LoRA on stage 0 only, so full weights.
TALKER_OPTIONS = replace(OPTIONS, enable_lora=False, max_lora_rank=None)


def golden_path(mode: str) -> Path:
    return GOLDEN_DIR / f"qwen3_omni_moe_{mode}.json"


def options_for(mode: str) -> DeployOptions:
    return TALKER_OPTIONS if mode == "talker" else OPTIONS


def generate(mode: str) -> str:
    adapter = get_rollout_adapter("qwen3_omni_moe")
    return render_deploy_config(build_deploy_config(adapter, mode, LAYOUT, options_for(mode)))


def needs_vllm_omni(mode: str) -> None:
    """The stages after the thinker carry vLLM-Omni's own sampling defaults, read from the
    installed package: without it they are absent and the goldens differ."""
    if mode != "thinker_only" and importlib.util.find_spec("vllm_omni") is None:
        pytest.skip("the multi-stage deploy configs read vLLM-Omni's defaults: uv sync --extra gpu")


@pytest.mark.parametrize("mode", MODES)
def test_deploy_config_matches_golden(mode: str) -> None:
    needs_vllm_omni(mode)
    path = golden_path(mode)
    if not path.exists():
        pytest.fail(f"{path} is missing; run `python {__file__} --regenerate` and review it.")
    assert generate(mode) == path.read_text(), (
        f"The deploy config for {mode!r} changed. If intended, run "
        f"`python {Path(__file__).name} --regenerate` and review the diff."
    )


def test_thinker_only_loads_no_audio_output_and_uses_its_pipeline() -> None:
    # Cross-check a few facts of the golden by hand, so a wrong regeneration is caught.
    adapter = get_rollout_adapter("qwen3_omni_moe")
    config = build_deploy_config(adapter, "thinker_only", LAYOUT, OPTIONS)
    assert config["pipeline"] == "qwen3_omni_moe_thinker_only"
    (thinker,) = config["stages"]
    assert thinker["devices"] == "2"
    assert thinker["hf_overrides"] == {"enable_audio_output": False}


def test_thinker_talker_names_its_two_stage_pipeline() -> None:
    # Not "qwen3_omni_moe": that name resolves to the 3-stage pipeline and starts code2wav.
    adapter = get_rollout_adapter("qwen3_omni_moe")
    config = build_deploy_config(adapter, "thinker_talker", LAYOUT, OPTIONS)
    assert config["pipeline"] == "qwen3_omni_moe_thinker_talker"
    assert [s["stage_id"] for s in config["stages"]] == [0, 1]
    assert [s["devices"] for s in config["stages"]] == ["2", "3"]


@pytest.mark.parametrize("mode", ["thinker_talker", "full"])
def test_stages_after_the_thinker_sample_with_vllm_omnis_production_defaults(mode: str) -> None:
    """A generated deploy config replaces vLLM-Omni's file; without its defaults the talker
    got vLLM's bare SamplingParams: 16 codec tokens, 1.3 s of speech."""
    needs_vllm_omni(mode)
    from omni_rollout.vllm_omni.deploy_config import upstream_stage_sampling

    adapter = get_rollout_adapter("qwen3_omni_moe")
    upstream = upstream_stage_sampling("qwen3_omni_moe.yaml")
    stages = build_deploy_config(adapter, mode, LAYOUT, OPTIONS)["stages"]
    assert "default_sampling_params" not in stages[0]  # the policy: every request sets its own
    talker = stages[1]["default_sampling_params"]
    assert talker == upstream[1] and talker["max_tokens"] >= 2048
    if mode == "full":
        assert stages[2]["default_sampling_params"] == upstream[2]


def test_talker_mode_trains_the_talker_on_the_thinker_talker_pipeline() -> None:
    """The talker (stage 1) takes the policy's knobs and device; the thinker and code2wav keep
    vLLM-Omni's production sampling (greedy thinker), as every stage but the policy does."""
    needs_vllm_omni("talker")
    from omni_rollout.vllm_omni.deploy_config import upstream_stage_sampling

    adapter = get_rollout_adapter("qwen3_omni_moe")
    config = build_deploy_config(adapter, "talker", LAYOUT, TALKER_OPTIONS)
    assert config["pipeline"] == "qwen3_omni_moe_talker_rl"
    thinker, talker, code2wav = config["stages"]
    assert talker["devices"] == "2" and talker["gpu_memory_utilization"] == 0.7
    # The thinker and code2wav share device 3 and split the rollout's 0.7 as vLLM-Omni's own
    # shares do (0.9 : 0.1): 0.63 and 0.07.
    assert (thinker["gpu_memory_utilization"], code2wav["gpu_memory_utilization"]) == (0.63, 0.07)
    assert "default_sampling_params" not in talker
    upstream = upstream_stage_sampling("qwen3_omni_moe.yaml")
    assert (thinker["default_sampling_params"], code2wav["default_sampling_params"]) == (upstream[0], upstream[2])


def test_talker_mode_refuses_lora_and_streamed_input() -> None:
    adapter = get_rollout_adapter("qwen3_omni_moe")
    with pytest.raises(DeployConfigError, match="serves a request's LoRA on stage 0 only"):
        build_deploy_config(adapter, "talker", LAYOUT, OPTIONS)
    with pytest.raises(DeployConfigError, match=r"fed by stages \[0\]; with async_chunk"):
        build_deploy_config(adapter, "talker", LAYOUT, replace(TALKER_OPTIONS, async_chunk=True))
    # A thinker policy reads the prompt only: streaming to the stages after it changes nothing it consumed.
    assert build_deploy_config(adapter, "thinker_talker", LAYOUT, replace(OPTIONS, async_chunk=True))["async_chunk"]


def test_full_mode_places_talker_and_code2wav_on_the_replicas_second_gpu() -> None:
    adapter = get_rollout_adapter("qwen3_omni_moe")
    config = build_deploy_config(adapter, "full", LAYOUT, OPTIONS)
    assert config["pipeline"] == "qwen3_omni_moe"
    assert [s["devices"] for s in config["stages"]] == ["2", "3", "3"]
    # The thinker has device 2 to itself; talker and code2wav split device 3's 0.7 as 0.6 : 0.1 (upstream's own).
    assert [s["gpu_memory_utilization"] for s in config["stages"]] == [0.7, 0.6, 0.1]
    # vLLM-Omni's CUDA section keeps the thinker's MRoPE on its CUDA op, beside our graph sizes.
    assert config["stages"][0]["compilation_config"] == {
        "custom_ops": ["+rotary_embedding"], "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64, 128, 256]}


def regenerate() -> None:
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    for mode in MODES:
        golden_path(mode).write_text(generate(mode))
        print(f"wrote {golden_path(mode)}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        raise SystemExit(f"usage: python {sys.argv[0]} --regenerate")
    regenerate()
