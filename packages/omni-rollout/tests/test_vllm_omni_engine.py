"""The engine wrapper (over the one driver) against a stand-in for ``vllm_omni.AsyncOmni``
that records calls.

The real engine runs in tests/gpu/test_vllm_omni_rollout.py, and
test_vllm_omni_upstream_api.py checks that the real AsyncOmni still takes the calls made
here. Covered: n samples per prompt and seeds, missing outputs, the order of sync calls
(colocated or not, LoRA or full), stage ids, fresh LoRA ids per version, and refusals.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from omni_contracts import RolloutAdapter, StageConfig
from omni_rollout.vllm_omni import (
    DeployOptions,
    EngineNotStartedError,
    EnginePausedError,
    EngineRequest,
    FullWeights,
    LoraWeights,
    PolicySampling,
    ReplicaLayout,
    ServedLora,
    VllmOmniEngine,
    WeightSyncError,
    WeightSyncPlan,
    plan_weight_sync,
)


class ChainAdapter(RolloutAdapter):
    """``text``: one stage. ``chain``: policy 0 -> 1 -> 2, syncing ``sync_ids``."""

    modes = ("text", "chain")

    def __init__(self, sync_ids: tuple[int, ...] = (0,)) -> None:
        self.sync_ids = sync_ids

    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        if mode == "text":
            return (StageConfig(0, "FakeLM", "text", final_output=True),)
        return (StageConfig(0, "LM", "text", final_output=True, return_hidden_states=True),
                StageConfig(1, "Talker", "codec", inputs=(0,)),
                StageConfig(2, "Vocoder", "audio", final_output=True, inputs=(1,)))

    def rollout_flags(self, mode: str) -> dict[int, dict[str, object]]:
        return {}

    def get_pipeline_id(self, mode: str) -> str:
        return f"fake_{mode}"

    def weight_sync_stage_ids(self, mode: str) -> tuple[int, ...]:
        return self.sync_ids


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: None = None
    finish_reason: str = "stop"


@dataclass
class Output:
    request_id: str
    outputs: list[Completion]
    stage_id: int = 0
    finished: bool = True


@dataclass
class FakeAsyncOmni:
    """Records every call in order. ``generate`` answers [first prompt id, seed] and
    nothing for a prompt whose first id is 0; the signatures follow AsyncOmni 0.28."""

    num_stages: int = 1
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    rpc_results: list[Any] = field(default_factory=lambda: [[None]])
    request_states: dict[str, Any] = field(default_factory=dict)
    paused: bool = False
    sleeping: set[str] = field(default_factory=set)

    @property
    def default_sampling_params_list(self) -> list[Any]:
        return [f"default{i}" for i in range(self.num_stages)]

    async def generate(self, prompt: dict[str, Any], *, request_id: str,
                       sampling_params_list: list[Any], lora_request: Any = None,
                       priority: int = 0) -> AsyncIterator[Output]:
        self.calls.append(("generate", request_id, sampling_params_list, lora_request))
        first = prompt["prompt_token_ids"][0]
        await asyncio.sleep(0.001 * (10 - first % 10))  # finish out of submission order
        if first != 0:
            seed = sampling_params_list[0]["seed"]
            yield Output(request_id, [Completion([first, seed or 0])])

    async def pause_generation(self, *, mode: str = "abort", clear_cache: bool = True,
                               stage_ids: list[int] | None = None) -> None:
        self.calls.append(("pause_generation", mode, stage_ids))
        self.paused = True

    async def sleep(self, stage_ids: list[int] | None = None, level: int = 2,
                    mode: str = "abort") -> list[Any]:
        self.calls.append(("sleep", level, stage_ids))
        self.paused, self.sleeping = True, {"weights", "kv_cache"}
        return []

    async def wake_up(self, stage_ids: list[int] | None = None,
                      tags: list[str] | None = None) -> list[Any]:
        self.calls.append(("wake_up", tags, stage_ids))
        self.sleeping -= set(tags or self.sleeping)
        return []

    async def is_sleeping(self) -> bool:
        return bool(self.sleeping)

    async def is_paused(self) -> bool:
        return self.paused

    async def resume_generation(self, stage_ids: list[int] | None = None) -> None:
        self.calls.append(("resume_generation", stage_ids))
        self.paused = False

    async def collective_rpc(self, method: str, timeout: float | None = None,
                             args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None,
                             stage_ids: list[int] | None = None) -> list[Any]:
        # What reload_weights would read, checked while the file still exists.
        path = Path((kwargs or {})["weights_path"])
        self.calls.append(("collective_rpc", method, stage_ids, sorted(kwargs or {}),
                           sorted(p.name for p in path.iterdir())))
        return self.rpc_results

    def shutdown(self) -> None:
        self.calls.append(("shutdown",))


@pytest.fixture(autouse=True)
def no_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain stand-ins for the vLLM objects the engine builds (no vLLM import on CPU)."""
    monkeypatch.setattr(PolicySampling, "to_vllm", lambda self, offset=0: {
        "seed": None if self.seed is None else self.seed + offset})
    monkeypatch.setattr(ServedLora, "to_vllm", lambda self: self)


def make_engine(tmp_path: Path, mode: str = "text", sync_ids: tuple[int, ...] = (0,),
                **options: Any) -> tuple[VllmOmniEngine, FakeAsyncOmni]:
    engine = VllmOmniEngine("unused", ChainAdapter(sync_ids), mode, layout=ReplicaLayout(),
                            options=DeployOptions(**options), work_dir=tmp_path)
    fake = FakeAsyncOmni(num_stages=len(engine.adapter.build_stage_configs(mode)))
    engine._attach(fake)
    return engine, fake


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    engine, fake = make_engine(tmp_path)
    yield engine, fake
    engine.close()


def lora_weights(scale: float = 1.0) -> LoraWeights:
    return LoraWeights(
        tensors={"base_model.model.layers.0.q_proj.lora_A.weight": torch.full((2, 4), scale),
                 "base_model.model.layers.0.q_proj.lora_B.weight": torch.zeros(4, 2)},
        config={"r": 2, "lora_alpha": 4, "target_modules": {"q_proj"}, "peft_type": "LORA"},
    )


def full_weights() -> FullWeights:
    return FullWeights({"thinker.model.norm.weight": torch.ones(4)})


def actions(fake: FakeAsyncOmni) -> list[str]:
    return [call[0] for call in fake.calls]


# ---- generation ----------------------------------------------------------------------


def test_generate_before_start_says_what_to_do(tmp_path: Path) -> None:
    engine = VllmOmniEngine("m", ChainAdapter(), "text", layout=ReplicaLayout(),
                            options=DeployOptions(), work_dir=tmp_path)
    with pytest.raises(EngineNotStartedError, match=r"call VllmOmniEngine.start\(\) first"):
        engine.generate([EngineRequest([1])], PolicySampling())
    plan = plan_weight_sync(engine.adapter, "text", payload="full", colocated=False)
    with pytest.raises(EngineNotStartedError):
        engine.after_train(plan, full_weights())


def test_seeded_sampling_gives_sample_k_seed_plus_k(engine: Any) -> None:
    vllm_engine, fake = engine
    results = vllm_engine.generate([EngineRequest([5]), EngineRequest([6])],
                                   PolicySampling(n=3, seed=10))
    # Each sample carries [prompt id, its seed]; results stay in request/sample order
    # although the fake finishes requests out of order.
    assert [[r.sample.response_ids for r in per] for per in results] == [
        [(5, 10), (5, 11), (5, 12)],
        [(6, 10), (6, 11), (6, 12)],
    ]
    # One request per sample, all with distinct ids, the policy params at stage 0.
    request_ids = [call[1] for call in fake.calls]
    assert len(request_ids) == 6 and len(set(request_ids)) == 6


def test_unseeded_sampling_sends_n_requests_per_prompt(engine: Any) -> None:
    vllm_engine, fake = engine
    results = vllm_engine.generate([EngineRequest([5]), EngineRequest([6])], PolicySampling(n=2))
    assert actions(fake) == ["generate"] * 4
    assert [len(per) for per in results] == [2, 2]
    assert results[1][0].sample.response_ids == (6, 0)


def test_other_stages_keep_their_default_params(tmp_path: Path) -> None:
    vllm_engine, fake = make_engine(tmp_path, mode="chain")
    vllm_engine.generate([EngineRequest([5])], PolicySampling(seed=1))
    (_, _, params, lora) = fake.calls[0]
    assert params == [{"seed": 1}, "default1", "default2"]
    assert lora is None  # nothing synced yet: the base model serves
    vllm_engine.close()


def test_request_without_output_becomes_an_abort(engine: Any) -> None:
    vllm_engine, _ = engine
    (only,) = vllm_engine.generate([EngineRequest([0, 3])], PolicySampling())
    assert only[0].aborted and only[0].sample.response_ids == ()


def test_no_requests_make_no_engine_call(engine: Any) -> None:
    vllm_engine, fake = engine
    assert vllm_engine.generate([], PolicySampling()) == []
    assert fake.calls == []


def test_close_shuts_down_once(engine: Any) -> None:
    vllm_engine, fake = engine
    vllm_engine.close()
    vllm_engine.close()
    assert actions(fake) == ["shutdown"]
    with pytest.raises(EngineNotStartedError):
        vllm_engine.generate([EngineRequest([1])], PolicySampling())


# ---- weight sync ---------------------------------------------------------------------


def test_colocated_lora_round_trip_order_and_fresh_id_used_by_next_generate(
    tmp_path: Path,
) -> None:
    vllm_engine, fake = make_engine(tmp_path, enable_lora=True, max_lora_rank=8)
    plan = plan_weight_sync(vllm_engine.adapter, "text", payload="lora", colocated=True)
    for version in (1, 2):
        vllm_engine.generate([EngineRequest([5])], PolicySampling())
        vllm_engine.before_train(plan)
        vllm_engine.after_train(plan, lora_weights(float(version)))
        assert vllm_engine.weight_version == version
    vllm_engine.generate([EngineRequest([5])], PolicySampling())

    # pause -> sleep(1) before training; wake weights -> (adapter swap, no engine call)
    # -> wake kv_cache -> resume after it; all on the whole pipeline.
    round_trip = [("pause_generation", "abort", None), ("sleep", 1, None),
                  ("wake_up", ["weights"], None), ("wake_up", ["kv_cache"], None),
                  ("resume_generation", None)]
    controls = [call for call in fake.calls if call[0] != "generate"]
    assert controls == round_trip * 2
    # Each generate carries the adapter of the latest completed sync: none, v1, v2.
    served = [call[3] for call in fake.calls if call[0] == "generate"]
    assert served[0] is None
    assert [(lora.name, lora.int_id) for lora in served[1:]] == [
        ("omni-rl-policy-v1", 1), ("omni-rl-policy-v2", 2)]
    # v2 is staged as a PEFT directory; v1's directory is gone (no request uses it).
    v1, v2 = served[1].path, served[2].path
    assert not v1.exists()
    assert sorted(p.name for p in v2.iterdir()) == ["adapter_config.json",
                                                    "adapter_model.safetensors"]
    assert json.loads((v2 / "adapter_config.json").read_text())["target_modules"] == ["q_proj"]
    vllm_engine.close()


def test_separate_engine_full_sync_loads_only_the_plans_stages(tmp_path: Path) -> None:
    vllm_engine, fake = make_engine(tmp_path, mode="chain", sync_ids=(0, 1))
    plan = plan_weight_sync(vllm_engine.adapter, "chain", payload="full", colocated=False)
    vllm_engine.before_train(plan)
    vllm_engine.after_train(plan, full_weights())
    # No sleep/wake without colocation; one in-place reload on stages 0 and 1 (not 2),
    # reading a one-file checkpoint, which is removed once loaded.
    assert fake.calls == [("collective_rpc", "reload_weights", [0, 1],
                           ["is_checkpoint_format", "weights_path"], ["model.safetensors"])]
    assert vllm_engine.weight_version == 1 and vllm_engine.served_lora is None
    assert not (tmp_path / "weights" / "v1").exists()
    vllm_engine.close()


def test_colocated_full_sync_reloads_between_the_two_wake_ups(tmp_path: Path) -> None:
    vllm_engine, fake = make_engine(tmp_path)
    plan = plan_weight_sync(vllm_engine.adapter, "text", payload="full", colocated=True)
    vllm_engine.before_train(plan)
    vllm_engine.after_train(plan, full_weights())
    assert [(c[0], c[1]) for c in fake.calls] == [
        ("pause_generation", "abort"), ("sleep", 1), ("wake_up", ["weights"]),
        ("collective_rpc", "reload_weights"), ("wake_up", ["kv_cache"]),
        ("resume_generation", None)]
    assert fake.calls[3][2] == [0]
    vllm_engine.close()


def test_a_failed_reload_is_an_error_and_the_next_sync_takes_a_new_version(
    tmp_path: Path,
) -> None:
    vllm_engine, fake = make_engine(tmp_path)
    plan = plan_weight_sync(vllm_engine.adapter, "text", payload="full", colocated=False)
    # How vLLM-Omni's stage pool reports a worker exception in a non-control RPC.
    fake.rpc_results = [{"supported": False, "error": "KeyError: 'thinker.x'"}]
    with pytest.raises(WeightSyncError, match=r"stages \[0\] failed: .*KeyError"):
        vllm_engine.after_train(plan, full_weights())
    assert vllm_engine.weight_version == 0
    fake.rpc_results = [[None]]
    vllm_engine.after_train(plan, full_weights())
    assert vllm_engine.weight_version == 2  # v1 was issued to the failed attempt
    vllm_engine.close()


def test_generate_between_before_and_after_train_is_refused(tmp_path: Path) -> None:
    vllm_engine, fake = make_engine(tmp_path)
    plan = plan_weight_sync(vllm_engine.adapter, "text", payload="full", colocated=True)
    vllm_engine.before_train(plan)
    with pytest.raises(EnginePausedError, match=r"call after_train"):
        vllm_engine.generate([EngineRequest([5])], PolicySampling())
    vllm_engine.after_train(plan, full_weights())
    assert len(vllm_engine.generate([EngineRequest([5])], PolicySampling())) == 1
    vllm_engine.close()


def test_payload_must_match_the_plan(tmp_path: Path) -> None:
    vllm_engine, fake = make_engine(tmp_path, enable_lora=True, max_lora_rank=8)
    plan = plan_weight_sync(vllm_engine.adapter, "text", payload="lora", colocated=False)
    with pytest.raises(WeightSyncError, match="payload is 'lora', which takes LoraWeights"):
        vllm_engine.after_train(plan, full_weights())
    assert fake.calls == []
    vllm_engine.close()


def test_plans_the_engine_cannot_run_are_refused_before_any_call(tmp_path: Path) -> None:
    vllm_engine, fake = make_engine(tmp_path, mode="chain", sync_ids=(0, 1),
                                    enable_sleep_mode=False)
    lora = plan_weight_sync(vllm_engine.adapter, "chain", payload="lora", colocated=True)
    with pytest.raises(WeightSyncError) as error:
        vllm_engine.before_train(lora)
    message = str(error.value)
    assert "enable_sleep_mode=False" in message
    assert "DeployOptions(enable_lora=True" in message
    assert "serves a request's LoRA on stage 0 only" in message and "[0, 1]" in message
    level2 = plan_weight_sync(vllm_engine.adapter, "chain", payload="full", colocated=True,
                              sleep_level=2)
    with pytest.raises(WeightSyncError, match=r"after sleep\(level=2\)"):
        vllm_engine.before_train(level2)
    other_mode = WeightSyncPlan("full", (3,), False, (), ())
    with pytest.raises(WeightSyncError, match=r"stages \[3\], which mode 'chain' does not have"):
        vllm_engine.after_train(other_mode, full_weights())
    assert fake.calls == []
    vllm_engine.close()
