"""Weight-sync plans: which stages, which payload, and the colocated sleep/wake order."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from omni_contracts import RolloutAdapter, StageConfig
from omni_rollout.vllm_omni.weight_sync import SyncStep, WeightSyncError, plan_weight_sync


class ChainAdapter(RolloutAdapter):
    """Policy stage 0 feeding stages 1 and 2; only the policy is trained (the default)."""

    modes = ("chain",)

    def __init__(self, sync_ids: tuple[int, ...] | None = None) -> None:
        self.sync_ids = sync_ids

    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        return (StageConfig(0, "LM", "text", final_output=True, return_hidden_states=True),
                StageConfig(1, "Talker", "codec", inputs=(0,)),
                StageConfig(2, "Vocoder", "audio", final_output=True, inputs=(1,)))

    def rollout_flags(self, mode: str) -> dict[int, dict[str, object]]:
        return {0: {"return_hidden_states": True}}

    def get_pipeline_id(self, mode: str) -> str:
        return "chain"

    def weight_sync_stage_ids(self, mode: str) -> tuple[int, ...]:
        return self.sync_ids if self.sync_ids is not None else super().weight_sync_stage_ids(mode)


def test_colocated_lora_sleeps_then_wakes_weights_before_kv_cache() -> None:
    plan = plan_weight_sync(ChainAdapter(), "chain", payload="lora", colocated=True)
    assert plan.stage_ids == (0,)
    assert plan.before_train == (SyncStep("pause_generation"), SyncStep("sleep", level=1))
    assert [(s.action, s.tags) for s in plan.after_train] == [
        ("wake_up", ("weights",)),
        ("add_lora", ()),
        ("wake_up", ("kv_cache",)),
        ("resume_generation", ()),
    ]
    assert plan.after_train[1].stage_ids == (0,)


def test_separate_engine_full_weights_only_loads_the_synced_stages() -> None:
    plan = plan_weight_sync(ChainAdapter(sync_ids=(0, 1)), "chain", payload="full",
                            colocated=False)
    assert plan.before_train == ()
    assert plan.after_train == (SyncStep("load_weights", (0, 1)),)


def test_full_weights_may_discard_at_level_two() -> None:
    plan = plan_weight_sync(ChainAdapter(), "chain", payload="full", colocated=True,
                            sleep_level=2)
    assert plan.before_train[1] == SyncStep("sleep", level=2)


def test_lora_refuses_level_two_and_says_why() -> None:
    with pytest.raises(WeightSyncError, match="discards the engine's base weights"):
        plan_weight_sync(ChainAdapter(), "chain", payload="lora", colocated=True, sleep_level=2)


@pytest.mark.parametrize("sync_ids", [(), (3,)])
def test_sync_stages_must_be_pipeline_stages(sync_ids: tuple[int, ...]) -> None:
    with pytest.raises(WeightSyncError, match=r"must name at least one of the pipeline's stages \[0, 1, 2\]"):
        plan_weight_sync(ChainAdapter(sync_ids=sync_ids), "chain", payload="full", colocated=False)


def test_unknown_payload_lists_the_valid_ones() -> None:
    with pytest.raises(WeightSyncError, match="valid: lora, full"):
        plan_weight_sync(ChainAdapter(), "chain", payload="delta", colocated=False)  # type: ignore[arg-type]
