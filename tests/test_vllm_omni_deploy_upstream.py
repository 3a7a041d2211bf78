"""Generated deploy configs against vLLM-Omni's own deploy files, stage by stage.

A generated config replaces vLLM-Omni's production file for the pipeline, so what that file
sets per stage must survive unless ``deploy_config`` changes it on purpose: the keys in
``UPSTREAM_CHANGES`` (every stage) and ``POLICY_UPSTREAM_CHANGES`` (the trained stage), each
with its reason, plus what the caller or the model package asks for explicitly. The file is
read here with PyYAML and its ``platforms.cuda`` section applied by hand, not through the
module under test. Then the memory each stage may take and sleep mode (colocated training),
and prefix caching (off unless the run asks).
"""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from omni_contracts import get_rollout_adapter
from omni_rollout.vllm_omni.deploy_config import (
    POLICY_UPSTREAM_CHANGES,
    UPSTREAM_CHANGES,
    DeployOptions,
    build_deploy_config,
)
from omni_rollout.vllm_omni.devices import ReplicaLayout

if importlib.util.find_spec("vllm_omni") is None:  # pragma: no cover
    pytest.skip("compares against vLLM-Omni's deploy files: uv sync --extra gpu", allow_module_level=True)

CASES = [("qwen3_omni_moe", "thinker_talker"), ("qwen3_omni_moe", "full"), ("qwen3_omni_moe", "talker"),
         ("qwen2_5_omni", "full")]
# verl's colocated replica at TP 1 puts every stage on its one training GPU; the goldens'
# replica has two (the policy on one, the other stages on the other).
ONE_GPU = ReplicaLayout()
TWO_GPUS = ReplicaLayout(replica_rank=1, num_replicas=2, gpus_per_replica=2, num_visible_devices=4)
SHARE = 0.5  # verl's rollout.gpu_memory_utilization default
OPTIONS = DeployOptions(gpu_memory_utilization=SHARE, max_num_seqs=256, max_model_len=6208,
                        cudagraph_capture_sizes=(1, 2, 4, 8), logprobs_mode="processed_logprobs",
                        extra_policy_args={"max_num_batched_tokens": 8192, "seed": 0})


def upstream_file(pipeline: str, mode: str) -> dict[str, Any]:
    name = get_rollout_adapter(pipeline).upstream_deploy_file(mode)
    assert name is not None
    spec = importlib.util.find_spec("vllm_omni")
    assert spec is not None and spec.submodule_search_locations
    import yaml

    return dict(yaml.safe_load((Path(next(iter(spec.submodule_search_locations))) / "deploy" / name).read_text()))


def upstream_stages_on_cuda(raw: dict[str, Any]) -> dict[int, dict[str, Any]]:
    stages = {int(stage["stage_id"]): dict(stage) for stage in raw["stages"]}
    for override in ((raw.get("platforms") or {}).get("cuda") or {}).get("stages") or []:
        stages[int(override["stage_id"])].update({k: v for k, v in override.items() if k != "stage_id"})
    return stages


def leaves(mapping: dict[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, (*prefix, key))
        else:
            yield (*prefix, key), value


def lookup(mapping: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = mapping
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return "<dropped>"
        node = node[key]
    return node


def build(pipeline: str, mode: str, layout: ReplicaLayout, options: DeployOptions = OPTIONS) -> dict[str, Any]:
    return build_deploy_config(get_rollout_adapter(pipeline), mode, layout, options)


def test_the_qwen3_file_still_sets_what_this_test_is_about() -> None:
    """vLLM-Omni's CUDA section keeps the thinker's MRoPE on its CUDA op (compiled, it fuses
    the Q/K norms into the rotary and changes Qwen3-Omni's output, their #6090)."""
    stages = upstream_stages_on_cuda(upstream_file("qwen3_omni_moe", "full"))
    assert stages[0]["compilation_config"] == {"custom_ops": ["+rotary_embedding"]}
    assert all(stage["enable_prefix_caching"] is False for stage in stages.values())


def test_every_deliberate_change_says_why() -> None:
    for key, why in {**UPSTREAM_CHANGES, **POLICY_UPSTREAM_CHANGES}.items():
        assert isinstance(why, str) and len(why) > 20, key


@pytest.mark.parametrize("layout", [ONE_GPU, TWO_GPUS], ids=["one_gpu", "two_gpus"])
@pytest.mark.parametrize(("pipeline", "mode"), CASES)
def test_every_upstream_stage_setting_is_kept_unless_changed_on_purpose(
    pipeline: str, mode: str, layout: ReplicaLayout
) -> None:
    adapter = get_rollout_adapter(pipeline)
    raw = upstream_file(pipeline, mode)
    upstream = upstream_stages_on_cuda(raw)
    config = build(pipeline, mode, layout)
    policy = adapter.policy_stage_id(mode)
    lost = []
    for stage in config["stages"]:
        sid = stage["stage_id"]
        allowed = set(UPSTREAM_CHANGES) | set(adapter.get_stage_engine_extras(sid, mode))
        if sid == policy:
            allowed |= set(POLICY_UPSTREAM_CHANGES) | set(OPTIONS.extra_policy_args)
        for path, value in leaves(upstream[sid]):
            if path == ("stage_id",) or path[0] in allowed or ".".join(path) in allowed:
                continue
            if lookup(stage, path) != value:
                lost.append(f"stage {sid} {'.'.join(path)}: upstream {value!r}, ours {lookup(stage, path)!r}")
        for connector in (stage.get("input_connectors") or {}).values():  # named ones resolve as upstream's
            assert config["connectors"][connector] == raw["connectors"][connector]
    assert not lost, "dropped or changed without a documented reason:\n" + "\n".join(lost)


@pytest.mark.parametrize("layout", [ONE_GPU, TWO_GPUS], ids=["one_gpu", "two_gpus"])
@pytest.mark.parametrize(("pipeline", "mode"), CASES)
def test_every_stage_has_a_share_of_the_rollout_memory_and_sleeps(
    pipeline: str, mode: str, layout: ReplicaLayout
) -> None:
    """A stage without gpu_memory_utilization takes vLLM's 0.92 of a GPU the actor trains on,
    and one without sleep mode never gives it back (and fails the colocated sleep)."""
    stages = build(pipeline, mode, layout)["stages"]
    on_device: dict[str, list[Fraction]] = defaultdict(list)
    for stage in stages:
        assert stage["enable_sleep_mode"] is True, stage["stage_id"]
        share = stage["gpu_memory_utilization"]
        assert 0 < share <= SHARE
        for device in stage["devices"].split(","):
            on_device[device].append(Fraction(str(share)))
    for device, shares in on_device.items():
        assert sum(shares) <= Fraction(str(SHARE)), (device, shares)
    awake = build(pipeline, mode, layout, replace(OPTIONS, enable_sleep_mode=False))["stages"]
    assert all(stage["enable_sleep_mode"] is False for stage in awake)


def test_the_share_is_split_like_vllm_omnis_own_shares() -> None:
    # Qwen3-Omni's file gives thinker / talker / code2wav 0.9 / 0.6 / 0.1 of a GPU. On one GPU
    # the rollout's 0.5 splits in that proportion, rounded down to 1e-4:
    # 0.5 * 0.9 / 1.6 = 0.28125 -> 0.2812; 0.5 * 0.6 / 1.6 = 0.1875; 0.5 * 0.1 / 1.6 = 0.03125 -> 0.0312.
    stages = build("qwen3_omni_moe", "talker", ONE_GPU)["stages"]
    assert [s["gpu_memory_utilization"] for s in stages] == [0.2812, 0.1875, 0.0312]
    # Two GPUs: the policy (the talker here) has its own and keeps the whole share; the thinker
    # and code2wav split theirs 0.9 : 0.1 -> 0.45 and 0.05.
    stages = build("qwen3_omni_moe", "talker", TWO_GPUS)["stages"]
    assert [(s["devices"], s["gpu_memory_utilization"]) for s in stages] == [("3", 0.45), ("2", 0.5), ("3", 0.05)]


@pytest.mark.parametrize(("pipeline", "mode"), CASES)
def test_prefix_caching_is_off_on_every_stage_unless_the_run_turns_it_on(pipeline: str, mode: str) -> None:
    """vLLM-Omni's files turn it off per stage; a per-stage value would override the top-level
    one vLLM-Omni applies to every stage, so a run that asks for it must still get it."""

    def effective(config: dict[str, Any]) -> list[bool]:
        return [stage.get("enable_prefix_caching", config["enable_prefix_caching"]) for stage in config["stages"]]

    assert not any(effective(build(pipeline, mode, ONE_GPU, DeployOptions())))
    assert all(effective(build(pipeline, mode, ONE_GPU, replace(OPTIONS, enable_prefix_caching=True))))
