"""Asynchronous rollout on verl: ``async_training.max_staleness=1`` runs verl's one-step-off trainer.

verl 0.9.1's ``experimental/one_step_off_policy`` trainer samples step t+1's batch while step t
trains, on rollout replicas of their own (``actor_rollout_ref.hybrid_engine=false``): a pool
of ``rollout.nnodes`` x ``rollout.n_gpus_per_node`` apart from the trainer's. After each update
the actor's weights reach the replicas through a checkpoint engine (NCCL on GPUs; on the CPU
:mod:`omni_trainer.verl_engine.gloo_checkpoint`). Every batch is at most one policy version
old and trains on the rollout's own log-probs (rollout correction's bypass mode, which the
pre-flight requires, as verl's recipe sets it).

The omni pieces plug in as in a synchronous run: the same dataset class, reward function,
rollout replica and FSDP engine; the agent-loop manager is the batch-returning one
(:class:`~omni_trainer.verl_engine.agent_loop.OmniBatchAgentLoopManager`), since this trainer
takes each batch back whole.

Light: no verl import.
"""

from __future__ import annotations

from typing import Any

from omni_trainer.config import Config
from omni_trainer.verl_engine.settings import BATCH_AGENT_LOOP_MANAGER, GLOO_BACKEND, GLOO_BACKEND_MODULE

ONE_STEP_OFF = 1
"""The staleness verl's one-step-off trainer runs at."""


def is_one_step_off(config: Config) -> bool:
    return config.async_training.max_staleness == ONE_STEP_OFF


def one_step_off_values(config: Config) -> dict[str, Any]:
    """verl's keys for its one-step-off trainer (none for a synchronous run)."""
    if not is_one_step_off(config):
        return {}
    pool, rollout = config.rollout, config.actor_rollout_ref.rollout
    backend = rollout.checkpoint_engine.backend or (GLOO_BACKEND if config.trainer.device == "cpu" else "nccl")
    values: dict[str, Any] = {
        "actor_rollout_ref.hybrid_engine": False,
        # verl's one-step-off entry point copies its top-level rollout pool to these.
        "rollout.nnodes": pool.nnodes,
        "rollout.n_gpus_per_node": pool.n_gpus_per_node,
        "actor_rollout_ref.rollout.nnodes": pool.nnodes,
        "actor_rollout_ref.rollout.n_gpus_per_node": pool.n_gpus_per_node,
        # The replicas never sleep (weights sync while they hold them) and return log-probs.
        "actor_rollout_ref.rollout.free_cache_engine": False,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.rollout.checkpoint_engine.backend": backend,
        "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": (
            rollout.checkpoint_engine.update_weights_bucket_megabytes
        ),
        "actor_rollout_ref.rollout.agent.agent_loop_manager_class": BATCH_AGENT_LOOP_MANAGER,
    }
    if backend == GLOO_BACKEND:
        values["actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module"] = GLOO_BACKEND_MODULE
    return values


def rollout_slots(config: Config) -> int:
    """Rank slots the rollout's own pool takes (0 for a synchronous run, whose replicas share
    the trainer's ranks)."""
    return config.rollout.nnodes * config.rollout.n_gpus_per_node if is_one_step_off(config) else 0


def one_step_off_problems(config: Config) -> list[str]:
    """Why ``config``'s asynchronous rollout cannot run on verl."""
    staleness = config.async_training.max_staleness
    if staleness <= 0:
        return []
    problems = []
    if staleness > ONE_STEP_OFF:
        problems.append(
            f"async_training.max_staleness={staleness}: the verl engine runs verl's one-step-off trainer "
            "(max_staleness=1); verl's fully-async trainer (deeper staleness) is not wired in this version. "
            "Use max_staleness=1, or trainer.engine=local for any bound"
        )
    if config.distillation.enabled:
        problems.append(
            "async_training.max_staleness=1 with distillation.enabled=true: verl's one-step-off trainer has no "
            "teacher; distil synchronously (max_staleness=0)"
        )
    pool = config.rollout
    if pool.nnodes < 1 or pool.n_gpus_per_node < 1:
        problems.append(
            f"rollout.nnodes={pool.nnodes}, rollout.n_gpus_per_node={pool.n_gpus_per_node}: the one-step-off "
            "rollout needs a pool of its own, at least one GPU on one node"
        )
    # On the CPU every replica is one process (translate.cpu_values).
    replica = 1 if config.trainer.device == "cpu" else config.actor_rollout_ref.rollout.tensor_model_parallel_size
    if pool.n_gpus_per_node * pool.nnodes % max(replica, 1):
        problems.append(
            f"rollout.nnodes x rollout.n_gpus_per_node = {pool.nnodes * pool.n_gpus_per_node} GPUs do not hold "
            f"whole replicas of actor_rollout_ref.rollout.tensor_model_parallel_size={replica}"
        )
    backend = config.actor_rollout_ref.rollout.checkpoint_engine.backend
    if backend == "naive":
        problems.append(
            "actor_rollout_ref.rollout.checkpoint_engine.backend=naive syncs a rollout sharing the actor's "
            "process; one-step-off's rollout runs on its own ranks: leave it unset (nccl on GPUs, "
            f"{GLOO_BACKEND} on the CPU) or name another of verl's backends"
        )
    return problems
