"""Asynchronous rollout on verl: ``async_training.max_staleness`` picks verl's trainer.

- ``1``: verl 0.9.1's one-step-off trainer (``experimental/one_step_off_policy``) samples step
  t+1's batch while step t trains. Every batch is one policy update old.
- ``>= 2``: its fully-async trainer (``experimental/fully_async_policy``). A rollouter streams
  samples (one prompt's ``n`` responses each) into a message queue; the trainer takes
  ``data.train_batch_size`` of them a step. The replicas take the actor's weights every
  ``trigger_parameter_sync_step`` (T) steps, and the rollouter stops drawing once
  ``(1 + staleness_threshold) x T`` steps' samples (s) wait or run since the last sync.

Both run the replicas on a pool of their own (``actor_rollout_ref.hybrid_engine=false``):
``rollout.nnodes`` x ``rollout.n_gpus_per_node`` apart from the trainer's. After an update the
actor's weights reach them through a checkpoint engine (NCCL on GPUs; on the CPU
:mod:`omni_verl_cpu.gloo_checkpoint`). The actor trains on the rollout's own
log-probs (rollout correction's bypass mode, which the pre-flight requires, as verl's recipes
set it).

**The staleness bound.** A sample drawn with the weights of sync v is drawn before sync v+1,
after update T*(v+1) at the latest. At most (1+s)*T steps' samples wait or run then, first in
first out, so it is trained on within ceil((1+s)*T) steps, with at most
T + ceil((1+s)*T) - 1 updates the sampling weights had not seen. The pre-flight refuses knobs
whose bound exceeds ``max_staleness``; unset, T is 1 and s is ``max_staleness - 1``, which
make the bound ``max_staleness``. With ``partial_rollout=true`` a sample the sync aborted
resumes with the new weights: the bound holds for its last tokens only.

The omni pieces plug in as in a synchronous run: the same dataset class, reward function,
rollout replica and FSDP engine. The agent-loop managers are the sample-returning ones:
:class:`~omni_verl.agent_loop.OmniBatchAgentLoopManager` for one-step-off (through
verl's ``agent_loop_manager_class`` hook) and, for fully-async, whose rollouter has no such
hook, :mod:`omni_verl.fully_async`'s.

Light: no verl import.
"""

from __future__ import annotations

from typing import Any

from omni_trainer.config import Config
from omni_verl.settings import BATCH_AGENT_LOOP_MANAGER, staleness_bound
from omni_verl_cpu import GLOO_BACKEND, GLOO_BACKEND_MODULE

ONE_STEP_OFF = 1
"""The staleness verl's one-step-off trainer runs at; above it, the fully-async trainer."""


def is_one_step_off(config: Config) -> bool:
    return config.async_training.max_staleness == ONE_STEP_OFF


def is_fully_async(config: Config) -> bool:
    return config.async_training.max_staleness > ONE_STEP_OFF


def is_separate_rollout(config: Config) -> bool:
    """The rollout runs on ranks of its own (either asynchronous trainer)."""
    return config.async_training.max_staleness >= ONE_STEP_OFF


def sync_interval(config: Config) -> int:
    """T: steps between weight syncs."""
    value = config.async_training.trigger_parameter_sync_step
    return 1 if value is None else value


def staleness_threshold(config: Config) -> float:
    """s: how many syncs' samples (beyond one) the rollouter draws ahead."""
    value = config.async_training.staleness_threshold
    return float(config.async_training.max_staleness - 1) if value is None else value


def worst_staleness(config: Config) -> int:
    """Policy updates a fully-async sample can lag the actor that trains on it."""
    return staleness_bound(sync_interval(config), staleness_threshold(config))


def prompts_per_step(config: Config) -> int:
    """Samples (prompts) a fully-async step trains on: ``data.train_batch_size``, or verl's
    ``ppo_mini_batch_size`` x ``require_batches`` when a verl script sets it to 0."""
    batches = config.async_training.require_batches
    if config.data.train_batch_size == 0:
        return config.actor_rollout_ref.actor.ppo_mini_batch_size * (1 if batches is None else batches)
    return config.data.train_batch_size


def async_training_values(config: Config) -> dict[str, Any]:
    """verl's keys for its asynchronous trainers (none for a synchronous run)."""
    if not is_separate_rollout(config):
        return {}
    pool, rollout = config.rollout, config.actor_rollout_ref.rollout
    backend = rollout.checkpoint_engine.backend or (GLOO_BACKEND if config.trainer.device == "cpu" else "nccl")
    values: dict[str, Any] = {
        "actor_rollout_ref.hybrid_engine": False,
        # verl's entry points copy the top-level rollout pool to these.
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
    }
    if backend == GLOO_BACKEND:
        values["actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module"] = GLOO_BACKEND_MODULE
    if is_one_step_off(config):
        values["actor_rollout_ref.rollout.agent.agent_loop_manager_class"] = BATCH_AGENT_LOOP_MANAGER
        return values
    return values | fully_async_values(config)


def fully_async_values(config: Config) -> dict[str, Any]:
    """verl's fully-async keys: its batch semantics (``train_batch_size=0``, one prompt a
    request) and its staleness knobs, resolved (module docstring)."""
    knobs = config.async_training
    per_step = prompts_per_step(config)
    return {
        "data.train_batch_size": 0,
        "data.gen_batch_size": 1,
        "async_training.staleness_threshold": staleness_threshold(config),
        "async_training.trigger_parameter_sync_step": sync_interval(config),
        "async_training.require_batches": per_step // config.actor_rollout_ref.actor.ppo_mini_batch_size,
        "async_training.partial_rollout": knobs.partial_rollout,
        "async_training.concurrent_samples_per_replica": knobs.concurrent_samples_per_replica,
        "async_training.use_trainer_do_validate": False,
        "async_training.use_dynamic_resource_scheduling": False,
        "actor_rollout_ref.actor.use_rollout_log_probs": True,
        "rollout.total_rollout_steps": total_rollout_steps(config),
    }


def total_rollout_steps(config: Config) -> int | None:
    """Prompts the rollouter draws in all: ``rollout.total_rollout_steps``, else
    ``trainer.total_training_steps`` steps' worth; ``None``: the whole data for
    ``trainer.total_epochs`` (verl caps it there in any case)."""
    if config.rollout.total_rollout_steps is not None:
        return config.rollout.total_rollout_steps
    steps = config.trainer.total_training_steps
    return None if steps is None else steps * prompts_per_step(config) * sync_interval(config)


def fully_async_total_steps(config: Config, train_rows: int) -> int:
    """Training steps verl's fully-async trainer counts (one per weight sync): the prompts drawn
    over ``trainer.total_epochs``, capped by :func:`total_rollout_steps`, per sync."""
    drawn = train_rows * config.trainer.total_epochs
    cap = total_rollout_steps(config)
    if cap is not None:
        drawn = min(drawn, cap)
    return drawn // (prompts_per_step(config) * sync_interval(config))


def total_steps(config: Config, train_rows: int) -> int:
    """The run's steps, as verl counts them (full batches per epoch, dropping the last)."""
    if config.trainer.total_training_steps is not None:
        return config.trainer.total_training_steps
    if is_fully_async(config):
        return fully_async_total_steps(config, train_rows)
    return train_rows // config.data.train_batch_size * config.trainer.total_epochs


def rollout_slots(config: Config) -> int:
    """Rank slots the rollout's own pool takes (0 for a synchronous run, whose replicas share
    the trainer's ranks)."""
    return config.rollout.nnodes * config.rollout.n_gpus_per_node if is_separate_rollout(config) else 0


def async_training_problems(config: Config) -> list[str]:
    """Why ``config``'s asynchronous rollout cannot run on verl."""
    staleness = config.async_training.max_staleness
    if staleness <= 0:
        return []
    trainer = "one-step-off" if is_one_step_off(config) else "fully-async"
    problems = []
    if config.distillation.enabled:
        problems.append(
            f"async_training.max_staleness={staleness} with distillation.enabled=true: the teacher is wired into "
            f"verl's synchronous trainer only, not its {trainer} one; distil synchronously (max_staleness=0)"
        )
    pool = config.rollout
    if pool.nnodes < 1 or pool.n_gpus_per_node < 1:
        problems.append(
            f"rollout.nnodes={pool.nnodes}, rollout.n_gpus_per_node={pool.n_gpus_per_node}: the {trainer} "
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
            f"actor_rollout_ref.rollout.checkpoint_engine.backend=naive syncs a rollout sharing the actor's "
            f"process; the {trainer} rollout runs on its own ranks: leave it unset (nccl on GPUs, "
            f"{GLOO_BACKEND} on the CPU) or name another of verl's backends"
        )
    if is_fully_async(config):
        problems.extend(fully_async_problems(config))
    return problems


def fully_async_problems(config: Config) -> list[str]:
    knobs, staleness = config.async_training, config.async_training.max_staleness
    problems = []
    interval, threshold = sync_interval(config), staleness_threshold(config)
    if interval < 1:
        problems.append(f"async_training.trigger_parameter_sync_step={interval} must be >= 1")
    if threshold < 0:
        problems.append(f"async_training.staleness_threshold={threshold} must be >= 0")
    if interval >= 1 and threshold >= 0 and worst_staleness(config) > staleness:
        problems.append(
            f"async_training.trigger_parameter_sync_step={interval} with staleness_threshold={threshold:g} lets a "
            f"sample lag the actor by up to {worst_staleness(config)} updates, more than "
            f"async_training.max_staleness={staleness}: raise max_staleness to {worst_staleness(config)}, or lower "
            "the two (unset, they are 1 and max_staleness - 1)"
        )
    mini = config.actor_rollout_ref.actor.ppo_mini_batch_size
    batches, per_step = knobs.require_batches, config.data.train_batch_size
    if per_step and per_step % mini:
        problems.append(
            f"data.train_batch_size={per_step} is not a whole number of actor_rollout_ref.actor.ppo_mini_batch_size="
            f"{mini}: verl's fully-async trainer takes whole mini-batches a step"
        )
    elif per_step and batches is not None and batches * mini != per_step:
        problems.append(
            f"async_training.require_batches={batches} x ppo_mini_batch_size={mini} is not data.train_batch_size="
            f"{per_step}: set one of them (data.train_batch_size=0 takes require_batches, as verl's scripts do)"
        )
    if knobs.use_trainer_do_validate or knobs.use_dynamic_resource_scheduling:
        problems.append(
            "async_training.use_trainer_do_validate / use_dynamic_resource_scheduling lend the trainer's GPUs to "
            "rollout replicas colocated with it, which this version does not wire; validation runs on the rollout's "
            "own replicas"
        )
    loop = config.actor_rollout_ref.rollout.agent.default_agent_loop
    if loop != "single_turn_agent":
        problems.append(
            f"actor_rollout_ref.rollout.agent.default_agent_loop={loop}: verl's fully-async rollouter runs every "
            "prompt with single_turn_agent"
        )
    if config.trainer.device == "cpu" and knobs.partial_rollout:
        problems.append(
            "async_training.partial_rollout=true aborts requests at each weight sync; the CPU's omni_local replica "
            "finishes every request with the weights it started with: set it to false"
        )
    if config.trainer.total_training_steps is not None and config.rollout.total_rollout_steps is not None:
        problems.append(
            "trainer.total_training_steps and rollout.total_rollout_steps both set the fully-async run's length; "
            "set one"
        )
    return problems
