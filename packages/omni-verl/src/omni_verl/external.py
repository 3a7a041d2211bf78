"""The module verl imports in every process (``VERL_USE_EXTERNAL_MODULES``).

Importing it registers omni-rl with verl's extension points:

- ``EngineRegistry``: :class:`~omni_verl.engine.OmniFSDPEngine` for
  ``(omni_language_model, fsdp|fsdp2)`` (decorator, on import of ``engine``);
- ``register_trainer``: :class:`~omni_verl.trainer.OmniSyncTrainer` as
  ``omni_sync`` (``trainer.v1.trainer_mode``; decorator, on import of ``trainer``);
- the agent-loop workers: verl loads :class:`~omni_verl.agent_loop.OmniAgentLoopManager`
  from ``actor_rollout_ref.rollout.agent.agent_loop_manager_class`` (no registration);
- the rollout replica registry (driver side) and the worker-side rollout registry, both
  under ``vllm_omni`` and ``omni_local`` (the CPU backend): a rollout backend must be in both;
- verl's platform registry: ``cpu`` (:mod:`omni_verl_cpu.platform`), imported and chosen only
  with ``VERL_PLATFORM=cpu``: a run on GPUs never imports the CPU plugin (:mod:`omni_verl_cpu`);
- policy losses and advantage estimators: verl implements every name omni-training
  registers; :func:`check_algorithms` fails the launch for a name verl lacks.

The reward function and dataset class are loaded by verl from config paths
(``reward.custom_reward_function``, ``data.custom_cls``) and need no registration.
"""

from __future__ import annotations

import os

from omni_verl.settings import CPU_PLATFORM_ENV
from omni_verl_cpu import PLATFORM as CPU_PLATFORM

# The CPU platform first: VERL_PLATFORM=cpu makes verl resolve it at its first device query,
# which the imports below may make.
if os.environ.get(CPU_PLATFORM_ENV) == CPU_PLATFORM:
    import omni_verl_cpu.platform  # noqa: F401  (registers "cpu" in verl's platform registry)

from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry  # noqa: E402

from omni_verl import engine as _engine  # noqa: F401,E402  (registers the engine)
from omni_verl import trainer as _trainer  # noqa: F401,E402  (registers the omni_sync trainer)
from omni_verl.compat import (  # noqa: E402
    equal_length_position_ids,
    gloo_process_group_on_cpu,
    register_worker_rollout,
)
from omni_verl.settings import ROLLOUT_NAME  # noqa: E402
from omni_verl_cpu import ROLLOUT_NAME as LOCAL_ROLLOUT_NAME  # noqa: E402
from omni_verl_cpu import WORKER_ROLLOUT as LOCAL_WORKER_ROLLOUT  # noqa: E402

WORKER_ROLLOUT = "verl.workers.rollout.vllm_rollout.ServerAdapter"
"""verl's vLLM worker-side adapter; it addresses the server as ``<rollout.name>_server_...``."""


def _load_replica() -> type[RolloutReplica]:
    from omni_verl.rollout import VllmOmniReplica

    return VllmOmniReplica


def _load_local_replica() -> type[RolloutReplica]:
    """The CPU rollout's replica, imported when verl asks for ``omni_local``."""
    from omni_verl_cpu.rollout import LocalRolloutReplica

    return LocalRolloutReplica


def register_rollout() -> None:
    """Register ``vllm_omni`` and ``omni_local`` (the CPU backend) in both of verl's rollout
    registries (idempotent)."""
    RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica)
    register_worker_rollout(ROLLOUT_NAME, "async", WORKER_ROLLOUT)
    RolloutReplicaRegistry.register(LOCAL_ROLLOUT_NAME, _load_local_replica)
    register_worker_rollout(LOCAL_ROLLOUT_NAME, "async", LOCAL_WORKER_ROLLOUT)


def check_algorithms(loss_mode: str, adv_estimator: str) -> None:
    """Raise ``ValueError`` naming verl's choices if it has no such loss or estimator."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, POLICY_LOSS_REGISTRY

    problems = []
    if loss_mode not in POLICY_LOSS_REGISTRY:
        problems.append(f"policy loss {loss_mode!r} (verl has {', '.join(sorted(POLICY_LOSS_REGISTRY))})")
    if adv_estimator not in ADV_ESTIMATOR_REGISTRY:
        problems.append(f"advantage estimator {adv_estimator!r} (verl has {', '.join(sorted(ADV_ESTIMATOR_REGISTRY))})")
    if problems:
        raise ValueError("The verl engine has no " + " and no ".join(problems) + "; use trainer.engine=local for it.")


register_rollout()
equal_length_position_ids()
if os.environ.get(CPU_PLATFORM_ENV) == CPU_PLATFORM:
    gloo_process_group_on_cpu()
