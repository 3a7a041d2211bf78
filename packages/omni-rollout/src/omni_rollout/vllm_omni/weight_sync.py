"""What one weight sync does, as data: which stages, what is sent, and in which order.

After each optimizer step the actor's weights reach the rollout engine. Only the stages
named by the adapter's ``weight_sync_stage_ids`` receive them (a thinker-only policy
leaves talker and code2wav untouched). Two payloads:

- ``lora``: only the adapter tensors travel; the engine keeps its base weights and serves
  the new adapter under a fresh LoRA id each version (vLLM caches adapters by id).
- ``full``: merged full weights are loaded into the stage's model in place.

Colocated mode (engine and actor share GPUs) wraps the sync in sleep/wake, following
vLLM-Omni's documented trainer order (pause -> sleep -> train -> wake -> resume) and the
seeds' "re-maps its memory (weights, then kv_cache)": weights are woken first so the
sync has somewhere to land while the KV pool is still released, then the KV cache.
Sleep level 1 offloads weights to CPU and frees the KV cache; LoRA needs it (the base
weights must survive); full weights could use level 2 (discard), since they are
overwritten anyway, but vLLM-Omni 0.28's ``AsyncOmni.wake_up`` refuses to wake from level 2,
so ``VllmOmniEngine.check_plan`` rejects such a plan. ``VllmOmniEngine.before_train`` and
``after_train`` execute a plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from omni_contracts import RolloutAdapter

Payload = Literal["lora", "full"]
Action = Literal[
    "pause_generation", "sleep", "wake_up", "add_lora", "load_weights", "resume_generation"
]


class WeightSyncError(ValueError):
    """The requested weight sync cannot work as configured."""


@dataclass(frozen=True)
class SyncStep:
    """One call on the engine, in order.

    Attributes:
        action: the engine method to call.
        stage_ids: the stages it applies to (empty: the whole pipeline).
        tags: memory tags for ``wake_up`` (``"weights"``, ``"kv_cache"``).
        level: sleep level for ``sleep``.
    """

    action: Action
    stage_ids: tuple[int, ...] = ()
    tags: tuple[str, ...] = ()
    level: int | None = None


@dataclass(frozen=True)
class WeightSyncPlan:
    """The stages that receive weights and the steps around training, in order.

    ``before_train`` runs once rollout for the step is done; ``after_train`` runs after
    the optimizer step and ends with the engine ready to generate again.
    """

    payload: Payload
    stage_ids: tuple[int, ...]
    colocated: bool
    before_train: tuple[SyncStep, ...]
    after_train: tuple[SyncStep, ...]


def plan_weight_sync(
    adapter: RolloutAdapter,
    mode: str,
    *,
    payload: Payload,
    colocated: bool,
    sleep_level: int = 1,
) -> WeightSyncPlan:
    """Build the plan for ``adapter`` in ``mode``.

    Raises:
        WeightSyncError: unknown payload, sleep level outside 1..2, level 2 with LoRA,
            or the adapter names no stage / a stage outside its pipeline.
    """
    if payload not in ("lora", "full"):
        raise WeightSyncError(f"Unknown weight-sync payload {payload!r}; valid: lora, full.")
    if sleep_level not in (1, 2):
        raise WeightSyncError(f"Sleep level must be 1 or 2, got {sleep_level}.")
    if payload == "lora" and sleep_level == 2:
        raise WeightSyncError(
            "Sleep level 2 discards the engine's base weights, but a LoRA sync only sends "
            "the adapter; use sleep_level=1 with LoRA."
        )
    adapter.check_mode(mode)
    stage_ids = tuple(adapter.weight_sync_stage_ids(mode))
    known = [stage.stage_id for stage in adapter.build_stage_configs(mode)]
    unknown = sorted(set(stage_ids) - set(known))
    if not stage_ids or unknown:
        raise WeightSyncError(
            f"{type(adapter).__name__}.weight_sync_stage_ids({mode!r}) returned "
            f"{list(stage_ids)}; it must name at least one of the pipeline's stages {known}."
        )

    load = SyncStep("add_lora" if payload == "lora" else "load_weights", stage_ids)
    if not colocated:
        return WeightSyncPlan(payload, stage_ids, False, (), (load,))
    return WeightSyncPlan(
        payload,
        stage_ids,
        True,
        before_train=(SyncStep("pause_generation"), SyncStep("sleep", level=sleep_level)),
        after_train=(
            SyncStep("wake_up", tags=("weights",)),
            load,
            SyncStep("wake_up", tags=("kv_cache",)),
            SyncStep("resume_generation"),
        ),
    )
