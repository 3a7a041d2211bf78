"""The module verl imports in every process (``VERL_USE_EXTERNAL_MODULES``).

Importing it registers omni-rl with verl's extension points:

- ``EngineRegistry``: :class:`~omni_trainer.verl_engine.engine.OmniFSDPEngine` for
  ``(omni_language_model, fsdp|fsdp2)`` (decorator, on import of ``engine``);
- the agent-loop workers: verl loads :class:`~omni_trainer.verl_engine.agent_loop.OmniAgentLoopManager`
  from ``actor_rollout_ref.rollout.agent.agent_loop_manager_class`` (no registration);
- the rollout replica registry (driver side) and the worker-side rollout registry, both
  under ``vllm_omni``: a rollout backend must be in both;
- policy losses and advantage estimators: verl implements every name omni-training
  registers; :func:`check_algorithms` fails the launch for a name verl lacks.

The reward function and dataset class are loaded by verl from config paths
(``reward.custom_reward_function``, ``data.custom_cls``) and need no registration.
"""

from __future__ import annotations

from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry

from omni_trainer.verl_engine import engine as _engine  # noqa: F401  (registers the engine)
from omni_trainer.verl_engine.compat import register_worker_rollout
from omni_trainer.verl_engine.settings import ROLLOUT_NAME

WORKER_ROLLOUT = "verl.workers.rollout.vllm_rollout.ServerAdapter"
"""verl's vLLM worker-side adapter; it addresses the server as ``<rollout.name>_server_...``."""


def _load_replica() -> type[RolloutReplica]:
    from omni_trainer.verl_engine.rollout import VllmOmniReplica

    return VllmOmniReplica


def register_rollout() -> None:
    """Register ``vllm_omni`` in both of verl's rollout registries (idempotent)."""
    RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica)
    register_worker_rollout(ROLLOUT_NAME, "async", WORKER_ROLLOUT)


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
