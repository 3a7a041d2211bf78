"""Device placement and deploy-config generation, with a fake two-mode adapter."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from omni_contracts import RolloutAdapter, SchemaError, StageConfig, UnknownModeError
from omni_rollout.vllm_omni.deploy_config import (
    DeployConfigError,
    DeployOptions,
    build_deploy_config,
    render_deploy_config,
    stage_memory_shares,
    write_deploy_config,
)
from omni_rollout.vllm_omni.devices import (
    DevicePlacementError,
    ReplicaLayout,
    physical_devices,
    place_stages,
)


class FakeAdapter(RolloutAdapter):
    """``single``: one text stage; ``chain``: text -> codec -> audio, like an omni model."""

    modes = ("single", "chain")

    def __init__(self, extras: dict[int, dict[str, Any]] | None = None,
                 stages: Sequence[StageConfig] | None = None) -> None:
        self.extras = extras or {}
        self.stages = stages
        self.registered = 0

    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        self.check_mode(mode)
        if self.stages is not None:
            return self.stages
        if mode == "single":
            return (StageConfig(0, "FakeLM", "text", final_output=True),)
        return (
            StageConfig(0, "FakeLM", "text", final_output=True, return_hidden_states=True),
            StageConfig(1, "FakeTalker", "codec", inputs=(0,)),
            StageConfig(2, "FakeVocoder", "audio", final_output=True, inputs=(1,)),
        )

    def rollout_flags(self, mode: str) -> dict[int, dict[str, object]]:
        return {}

    def get_pipeline_id(self, mode: str) -> str:
        return f"fake_{mode}"

    def ensure_pipeline_registered(self) -> None:
        self.registered += 1

    def get_engine_hf_overrides(self, mode: str) -> dict[str, Any]:
        return {"enable_audio_output": False} if mode == "single" else {}

    def get_stage_engine_extras(self, stage_id: int, mode: str) -> dict[str, Any]:
        return dict(self.extras.get(stage_id, {}))


class UpstreamAdapter(FakeAdapter):
    def upstream_deploy_file(self, mode: str) -> str | None:
        return "fake.yaml"


CHAIN = FakeAdapter().build_stage_configs("chain")


@pytest.mark.parametrize(("rank", "expected"), [(0, (0, 1)), (1, (2, 3)), (3, (6, 7))])
def test_replicas_own_disjoint_consecutive_devices(rank: int, expected: tuple[int, ...]) -> None:
    layout = ReplicaLayout(replica_rank=rank, num_replicas=4, gpus_per_replica=2)
    assert layout.replica_devices() == expected


def test_no_device_is_shared_between_replicas_of_a_node() -> None:
    layouts = [ReplicaLayout(r, 4, 2, tensor_parallel_size=2, num_visible_devices=8)
               for r in range(4)]
    used = [d for layout in layouts for p in place_stages(CHAIN, layout, 0) for d in p.devices]
    # Within a replica the later stages share its last device; across replicas, nothing.
    per_replica = [set(d for p in place_stages(CHAIN, layout, 0) for d in p.devices)
                   for layout in layouts]
    assert sorted(set(used)) == list(range(8))
    assert all(a.isdisjoint(b) for i, a in enumerate(per_replica) for b in per_replica[i + 1:])


def test_layout_from_visible_devices_maps_to_each_replicas_physical_gpus() -> None:
    # Launcher sees physical GPUs 4..7; replica 1 of 2 owns logical 2,3 = physical 6,7.
    layout = ReplicaLayout.from_visible_devices("4,5,6,7", replica_rank=1, num_replicas=2)
    assert layout.gpus_per_replica == 2
    assert physical_devices(layout.replica_devices(), "4,5,6,7") == ("6", "7")


def test_uneven_visible_devices_are_refused() -> None:
    with pytest.raises(DevicePlacementError, match="3 visible devices .* do not split evenly over 2"):
        ReplicaLayout.from_visible_devices(["0", "1", "2"], replica_rank=0, num_replicas=2)
    with pytest.raises(DevicePlacementError, match=r"Logical devices \[4\] are outside"):
        physical_devices([4], "0,1")


def test_policy_takes_tp_devices_and_other_stages_the_next_free_one() -> None:
    # 4 GPUs, TP 2: thinker on 4,5 (replica 1 owns 4..7), talker on 6, vocoder on 7.
    layout = ReplicaLayout(replica_rank=1, num_replicas=2, gpus_per_replica=4,
                           tensor_parallel_size=2)
    placed = place_stages(CHAIN, layout, policy_stage_id=0)
    assert [(p.devices_str, p.tensor_parallel_size) for p in placed] == [
        ("4,5", 2), ("6", 1), ("7", 1)]


def test_single_gpu_replica_colocates_every_stage() -> None:
    placed = place_stages(CHAIN, ReplicaLayout(replica_rank=2, num_replicas=3), 0)
    assert [p.devices_str for p in placed] == ["2", "2", "2"]


def test_layout_errors_are_reported_together_with_the_fix() -> None:
    with pytest.raises(DevicePlacementError) as error:
        ReplicaLayout(replica_rank=4, num_replicas=4, gpus_per_replica=2,
                      tensor_parallel_size=4, num_visible_devices=4)
    message = str(error.value)
    assert "replica_rank 4 is outside 0..3" in message
    assert "tensor_parallel_size 4 exceeds gpus_per_replica 2" in message
    assert "need 8 devices but only 4 are visible" in message


def test_unknown_policy_stage_is_an_error() -> None:
    with pytest.raises(DevicePlacementError, match="Policy stage 5 is not among"):
        place_stages(CHAIN, ReplicaLayout(), policy_stage_id=5)


def test_single_stage_config_shape() -> None:
    adapter = FakeAdapter()
    layout = ReplicaLayout(replica_rank=1, num_replicas=2, gpus_per_replica=1)
    config = build_deploy_config(
        adapter, "single", layout,
        DeployOptions(gpu_memory_utilization=0.7, max_num_seqs=256,
                      cudagraph_capture_sizes=(256, 1, 2, 4, 8, 16, 32, 64, 128)),
    )
    assert adapter.registered == 1
    assert config == {
        "pipeline": "fake_single",
        "async_chunk": False,
        "dtype": "bfloat16",
        "trust_remote_code": True,
        "enable_prefix_caching": False,
        "stages": [{
            "stage_id": 0,
            "devices": "1",
            "tensor_parallel_size": 1,
            "gpu_memory_utilization": 0.7,
            "max_num_seqs": 256,
            "enforce_eager": False,
            "enable_sleep_mode": True,
            "compilation_config": {"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64, 128, 256]},
            "hf_overrides": {"enable_audio_output": False},
        }],
    }


def test_only_the_policy_stage_gets_the_engine_knobs_and_extras_merge_last() -> None:
    adapter = FakeAdapter(extras={1: {"max_num_seqs": 8, "enforce_eager": True}})
    config = build_deploy_config(adapter, "chain", ReplicaLayout(gpus_per_replica=2),
                                 DeployOptions(enable_lora=True, max_lora_rank=32,
                                               logprobs_mode="processed_logprobs"))
    thinker, talker, vocoder = config["stages"]
    assert thinker["enable_lora"] is True and thinker["max_lora_rank"] == 32
    assert thinker["logprobs_mode"] == "processed_logprobs"
    # Every stage gets a memory share and sleeps; with no upstream file each weighs as vLLM's
    # default 0.92, so talker and vocoder split device 1's 0.8 evenly.
    assert thinker["gpu_memory_utilization"] == 0.8
    assert talker == {"stage_id": 1, "devices": "1", "tensor_parallel_size": 1, "gpu_memory_utilization": 0.4,
                      "enable_sleep_mode": True, "max_num_seqs": 8, "enforce_eager": True}
    assert vocoder == {"stage_id": 2, "devices": "1", "tensor_parallel_size": 1, "gpu_memory_utilization": 0.4,
                       "enable_sleep_mode": True}


def test_all_stages_eager_turns_every_stage_eager_and_only_that() -> None:
    """On the CPU every stage runs eager (vLLM's CPU build would compile each at start-up);
    ``enforce_eager`` alone touches the policy stage only."""
    adapter = FakeAdapter()
    policy_only = build_deploy_config(adapter, "chain", ReplicaLayout(gpus_per_replica=2), DeployOptions(enforce_eager=True))
    assert [stage.get("enforce_eager") for stage in policy_only["stages"]] == [True, None, None]
    everywhere = build_deploy_config(adapter, "chain", ReplicaLayout(gpus_per_replica=2),
                                     DeployOptions(all_stages_eager=True))
    assert [stage.get("enforce_eager") for stage in everywhere["stages"]] == [True, True, True]
    without = {key: value for key, value in everywhere["stages"][1].items() if key != "enforce_eager"}
    assert without == policy_only["stages"][1]  # nothing else changes


def test_memory_shares_split_each_device_by_weight_and_a_stage_takes_its_tightest_device() -> None:
    # The policy at TP 2 spans devices 0 and 1; talker and vocoder share device 1 with it.
    # Device 1 weighs 0.9 + 0.6 + 0.1 = 1.6: of the rollout's 0.8 the policy may take
    # 0.8 * 0.9 / 1.6 = 0.45 there (its whole 0.8 on device 0, the smaller wins), the talker
    # 0.8 * 0.6 / 1.6 = 0.3, the vocoder 0.8 * 0.1 / 1.6 = 0.05: 0.8 in all on device 1.
    placed = place_stages(CHAIN, ReplicaLayout(gpus_per_replica=2, tensor_parallel_size=2), 0)
    shares = stage_memory_shares(placed, {0: 0.9, 1: 0.6, 2: 0.1}, 0.8)
    assert shares == {0: 0.45, 1: 0.3, 2: 0.05}
    # Rounded down to 1e-4, so the device never sums above the share: 0.5 / 3 = 0.16666...
    assert stage_memory_shares(place_stages(CHAIN, ReplicaLayout(), 0), {0: 1, 1: 1, 2: 1}, 0.5) == {
        0: 0.1666, 1: 0.1666, 2: 0.1666}
    # A stage alone on its device keeps the share as given.
    assert stage_memory_shares(place_stages(CHAIN[:1], ReplicaLayout(), 0), {0: 0.3}, 0.55555) == {0: 0.55555}


def test_extras_may_not_set_a_memory_share() -> None:
    with pytest.raises(DeployConfigError, match=r"sets \['gpu_memory_utilization'\], which the replica layout and the memory"):
        build_deploy_config(FakeAdapter(extras={2: {"gpu_memory_utilization": 0.3}}), "chain", ReplicaLayout())


def fake_vllm_omni(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deploy_yaml: str | None) -> None:
    """An installed ``vllm_omni`` whose ``deploy/fake.yaml`` holds ``deploy_yaml``."""
    import importlib.machinery

    root = tmp_path / "vllm_omni"
    (root / "deploy").mkdir(parents=True)
    if deploy_yaml is not None:
        (root / "deploy" / "fake.yaml").write_text(deploy_yaml)
    spec = importlib.machinery.ModuleSpec("vllm_omni", None, is_package=True)
    spec.submodule_search_locations = [str(root)]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "vllm_omni" else real(name, *a))


def test_stages_after_the_policy_keep_the_engines_own_sampling_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_vllm_omni(tmp_path, monkeypatch, (
        "stages:\n"
        "  - {stage_id: 0, default_sampling_params: {temperature: 0.0, max_tokens: 2048}}\n"
        "  - {stage_id: 1, default_sampling_params: {temperature: 0.9, max_tokens: 4096}}\n"
        "  - {stage_id: 2, max_num_seqs: 4}\n"
    ))
    adapter = UpstreamAdapter(extras={1: {"default_sampling_params": {"max_tokens": 100}}})
    thinker, talker, vocoder = build_deploy_config(adapter, "chain", ReplicaLayout(gpus_per_replica=2))["stages"]
    assert "default_sampling_params" not in thinker  # the policy's come with every request
    assert talker["default_sampling_params"] == {"max_tokens": 100}  # the adapter's extras merge last
    assert "default_sampling_params" not in vocoder  # none upstream: nothing invented
    plain = build_deploy_config(UpstreamAdapter(), "chain", ReplicaLayout(gpus_per_replica=2))["stages"]
    assert plain[1]["default_sampling_params"] == {"temperature": 0.9, "max_tokens": 4096}


UPSTREAM_YAML = """
async_chunk: true
connectors:
  shm: {name: SharedMemoryConnector, extra: {codec_chunk_frames: 25}}
  unused: {name: OtherConnector}
stages:
  - {stage_id: 0, max_num_seqs: 64, max_num_batched_tokens: 32768, gpu_memory_utilization: 0.9, enforce_eager: true,
     enable_prefix_caching: false, trust_remote_code: true, devices: "0", default_sampling_params: {temperature: 0.0}}
  - {stage_id: 1, gpu_memory_utilization: 0.6, enable_prefix_caching: false, devices: "1",
     input_connectors: {from_stage_0: shm}, default_sampling_params: {temperature: 0.9, top_k: 50}}
  - {stage_id: 2, gpu_memory_utilization: 0.1, async_scheduling: false, devices: "1"}
platforms:
  cuda:
    stages:
      - {stage_id: 0, compilation_config: {custom_ops: ["+rotary_embedding"]}}
      - {stage_id: 1, default_sampling_params: {max_tokens: 4096}}
  rocm:
    stages:
      - {stage_id: 2, enforce_eager: true}
"""


def test_each_stage_starts_from_the_upstream_file_on_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_vllm_omni(tmp_path, monkeypatch, UPSTREAM_YAML)
    config = build_deploy_config(UpstreamAdapter(), "chain", ReplicaLayout(gpus_per_replica=2),
                                 DeployOptions(gpu_memory_utilization=0.8, cudagraph_capture_sizes=(2, 1),
                                               enable_prefix_caching=True))
    thinker, talker, vocoder = config["stages"]
    # The policy: our knobs over upstream's, its CUDA custom op beside our graph sizes, upstream's
    # eager kept (we never turn it off), its sampling defaults and pipeline-wide copies gone.
    assert thinker == {
        "stage_id": 0, "devices": "0", "tensor_parallel_size": 1, "gpu_memory_utilization": 0.8,
        "enable_sleep_mode": True, "max_num_seqs": 256, "max_num_batched_tokens": 32768, "enforce_eager": True,
        "compilation_config": {"custom_ops": ["+rotary_embedding"], "cudagraph_capture_sizes": [1, 2]},
    }
    # Device 1 splits 0.8 as 0.6 : 0.1, rounded down: 0.8 * 0.6 / 0.7 = 0.68571, 0.8 * 0.1 / 0.7 = 0.11428.
    # The CUDA sampling entry merges into the stage's; ROCm's eager code2wav is not carried.
    assert talker == {
        "stage_id": 1, "devices": "1", "tensor_parallel_size": 1, "gpu_memory_utilization": 0.6857,
        "enable_sleep_mode": True, "input_connectors": {"from_stage_0": "shm"},
        "default_sampling_params": {"temperature": 0.9, "top_k": 50, "max_tokens": 4096},
    }
    assert vocoder == {"stage_id": 2, "devices": "1", "tensor_parallel_size": 1, "gpu_memory_utilization": 0.1142,
                       "enable_sleep_mode": True, "async_scheduling": False}
    # The connectors the stages name come along; the run's pipeline-wide settings stay ours.
    assert config["connectors"] == {"shm": {"name": "SharedMemoryConnector", "extra": {"codec_chunk_frames": 25}}}
    assert config["enable_prefix_caching"] is True and config["async_chunk"] is False


def test_an_upstream_file_we_cannot_resolve_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_vllm_omni(tmp_path, monkeypatch, "base_config: other.yaml\nstages: []\n")
    with pytest.raises(DeployConfigError, match=r"uses \['base_config'\], which the deploy-config generator"):
        build_deploy_config(UpstreamAdapter(), "chain", ReplicaLayout(gpus_per_replica=2))


def test_a_missing_upstream_deploy_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_vllm_omni(tmp_path, monkeypatch, None)
    with pytest.raises(DeployConfigError, match=r"vLLM-Omni has no deploy file .*fake.yaml"):
        build_deploy_config(UpstreamAdapter(), "chain", ReplicaLayout(gpus_per_replica=2))


def test_extras_may_not_override_placement() -> None:
    adapter = FakeAdapter(extras={0: {"devices": "3", "tensor_parallel_size": 2}})
    with pytest.raises(DeployConfigError, match=r"sets \['devices', 'tensor_parallel_size'\]"):
        build_deploy_config(adapter, "single", ReplicaLayout())


def test_bad_topology_and_mode_are_refused_before_anything_is_written() -> None:
    gap = FakeAdapter(stages=(StageConfig(0, "A", "text"), StageConfig(2, "B", "text",
                                                                      final_output=True)))
    with pytest.raises(SchemaError, match="Stage ids must be 0..1"):
        build_deploy_config(gap, "single", ReplicaLayout())
    with pytest.raises(UnknownModeError, match="valid modes: single, chain"):
        build_deploy_config(FakeAdapter(), "full", ReplicaLayout())


def test_options_errors_name_each_field() -> None:
    with pytest.raises(DeployConfigError) as error:
        DeployOptions(gpu_memory_utilization=1.5, max_num_seqs=0, enable_lora=True)
    message = str(error.value)
    assert "gpu_memory_utilization must be in (0, 1]" in message
    assert "max_num_seqs must be >= 1" in message
    assert "enable_lora needs max_lora_rank" in message


def test_written_file_is_yaml_and_round_trips(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    config = build_deploy_config(FakeAdapter(), "chain", ReplicaLayout(gpus_per_replica=2))
    path = write_deploy_config(config, tmp_path / "deploy" / "replica0.yaml")
    assert yaml.safe_load(path.read_text()) == config
    assert json.loads(render_deploy_config(config)) == config
