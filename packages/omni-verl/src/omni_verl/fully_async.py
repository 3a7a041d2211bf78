"""verl's fully-async trainer with the omni pieces (``async_training.max_staleness >= 2``).

verl 0.9.1's ``FullyAsyncTaskRunner`` builds its ``FullyAsyncRollouter`` and
``FullyAsyncTrainer`` itself, and the rollouter its ``FullyAsyncAgentLoopManager``: there is no
``agent_loop_manager_class`` hook as in its other trainers. Left so, the rollouter's agent-loop
workers would build the actor's batch with verl's processor, which is ``None`` for Qwen3-Omni
(:mod:`omni_verl.agent_loop`): no media features and 1-D positions. Our
subclasses override the three private methods that name those classes
(``compat.PRIVATE_OVERRIDES``, each with a canary):

- :class:`OmniFullyAsyncTaskRunner` starts our rollouter and trainer;
- :class:`OmniFullyAsyncRollouter` starts :class:`OmniFullyAsyncAgentLoopManager`, whose
  workers are :class:`~omni_verl.agent_loop.OmniAgentLoopWorker`;
- :class:`OmniFullyAsyncTrainer` checks each step's samples against ``reward.max_error_rate``
  as it takes them from the queue, before it trains on them.

The pre-flight refuses what these do not wire: trainer-side (hybrid) rollout replicas, a
teacher, agent loops other than verl's single-turn one
(the launcher's pre-flight, ``omni_trainer.engines.verl.async_training``).
"""

from __future__ import annotations

from typing import Any

import ray
from verl.experimental.fully_async_policy.fully_async_main import FullyAsyncTaskRunner
from verl.experimental.fully_async_policy.fully_async_rollouter import (
    FullyAsyncAgentLoopManager,
    FullyAsyncLLMServerManager,
    FullyAsyncRollouter,
)
from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer
from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient

from omni_verl.agent_loop import OmniAgentLoopWorker, check_batch_rewards
from omni_verl.settings import staleness_bound
from omni_verl.compat import ray_actor_class


class OmniFullyAsyncAgentLoopManager(FullyAsyncAgentLoopManager):
    """verl's fully-async agent-loop manager (one prompt's samples a request), starting
    :class:`OmniAgentLoopWorker` workers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = ray.remote(OmniAgentLoopWorker)


class OmniFullyAsyncRollouter(ray_actor_class(FullyAsyncRollouter)):  # type: ignore[misc]
    """verl's rollouter, its samples drawn by :class:`OmniFullyAsyncAgentLoopManager`."""

    async def _init_async_rollout_manager(self) -> None:
        # The rollout's own replicas (the pre-flight refuses trainer-side ones) and the manager
        # streaming each prompt's samples, scored by the reward-loop workers as they finish.
        reward_model_alone = not self.use_rm or self.config.reward.reward_model.enable_resource_pool
        self.async_rollout_mode = True
        self.llm_server_manager = await FullyAsyncLLMServerManager.create(
            config=self.config, worker_group=self.get_hybrid_worker_group()
        )
        self.async_rollout_manager = await OmniFullyAsyncAgentLoopManager.create(
            config=self.config,
            llm_client=self.llm_server_manager.get_client(client_cls=FullyAsyncLLMServerClient),
            reward_loop_worker_handles=self.reward_loop_manager.reward_loop_workers if reward_model_alone else None,
            teacher_client=None,
        )


class OmniFullyAsyncTrainer(ray_actor_class(FullyAsyncTrainer)):  # type: ignore[misc]
    """verl's fully-async trainer, with three changes:

    - a step whose samples the scorer failed on beyond ``reward.max_error_rate`` stops the run
      before the update;
    - each step records how many updates its samples lag the actor (``async/staleness_*``),
      and stops the run if one lags beyond the bound the pre-flight derived;
    - each step's metrics are logged under its own step. verl 0.9.1 logs a sync's aggregate
      before adding the step that triggered it, so every record carried the previous step's
      metrics and the last step's were never logged.
    """

    async def _fit_generate(self, batch: Any = None) -> Any:
        batch = await super()._fit_generate(batch)
        interval = int(self.config.async_training.trigger_parameter_sync_step)
        updates = updates_so_far(self.current_param_version, self.local_trigger_step, interval)
        check_batch_rewards(updates + 1, batch.non_tensor_batch, str(self.config.trainer.default_local_dir))
        self.metrics.update(self._staleness_metrics(updates, batch.meta_info["trajectory_param_versions"]))
        return batch

    def _staleness_metrics(self, updates: int, versions: Any) -> dict[str, float]:
        """Updates each response's weights had not seen when the actor, ``updates`` updates in,
        trains on it (its last token's, under partial rollout); the responses trained so far at
        each lag (``async/staleness_<lag>``, the histogram, up to the bound)."""
        if any(version is None for version in versions):
            raise RuntimeError(
                f"step {updates + 1}: the rollout replica did not report which weights sampled a response "
                "(its global_steps); the staleness bound cannot be checked"
            )
        interval = int(self.config.async_training.trigger_parameter_sync_step)
        lags = [updates - interval * int(version) for version in versions]
        bound = self.__dict__.setdefault("_staleness_bound", fully_async_bound(self.config))
        if max(lags) > bound:
            raise RuntimeError(
                f"step {updates + 1}: a response lags the actor by {max(lags)} updates, beyond the bound of {bound} "
                "that async_training's knobs imply; the rollout drew ahead of verl's staleness_threshold"
            )
        histogram: dict[int, int] = self.__dict__.setdefault("_staleness_histogram", dict.fromkeys(range(bound + 1), 0))
        for lag in lags:
            histogram[lag] += 1
        return {
            "async/staleness_max": float(max(lags)),
            "async/staleness_mean": sum(lags) / len(lags),
            **{f"async/staleness_{lag}": float(count) for lag, count in histogram.items()},
        }

    def _fit_log_aggregated_training_metrics(self, rollout_reset_timing_raw: dict[str, Any]) -> None:
        # Held until this step's own metrics are in the aggregate (_fit_postprocess_step).
        self._sync_timing = rollout_reset_timing_raw

    def _fit_postprocess_step(self) -> None:
        super()._fit_postprocess_step()
        self._log_sync_aggregate()

    async def fit(self) -> None:
        await super().fit()
        self._log_sync_aggregate()  # a last, partial sync cycle

    def _log_sync_aggregate(self) -> None:
        timing = self.__dict__.pop("_sync_timing", None)
        if timing is not None:
            aggregator = self.metrics_aggregator
            aggregator.aggregation_rules["last"].extend(
                key for key in (f"async/staleness_{lag}" for lag in range(fully_async_bound(self.config) + 1))
                if key not in aggregator.aggregation_rules["last"]
            )
            super()._fit_log_aggregated_training_metrics(timing)


def updates_so_far(param_version: int, local_trigger_step: int, interval: int) -> int:
    """The actor's updates before the step verl's fully-async trainer is taking, from its
    version counter (a sync every ``interval`` steps) and its step within the sync cycle. Not
    from its ``global_steps``, which runs one ahead after a resume: its ``load_checkpoint`` sets
    it to the next step and ``fit`` adds one."""
    return param_version * interval + local_trigger_step - 1


def fully_async_bound(config: Any) -> int:
    """The staleness bound of verl's resolved config."""
    knobs = config.async_training
    return staleness_bound(int(knobs.trigger_parameter_sync_step), float(knobs.staleness_threshold))


# verl's own resource requests for its rollouter and trainer (their @ray.remote options).
ROLLOUTER = ray.remote(num_cpus=10, max_concurrency=100)(OmniFullyAsyncRollouter)  # type: ignore[call-overload]  # actor option
TRAINER = ray.remote(num_cpus=10)(OmniFullyAsyncTrainer)


class OmniFullyAsyncTask(ray_actor_class(FullyAsyncTaskRunner)):  # type: ignore[misc]
    """verl's fully-async task runner, starting :data:`ROLLOUTER` and :data:`TRAINER`."""

    def _create_rollouter(self, config: Any) -> None:
        rollouter = ROLLOUTER.remote(
            config=config,
            tokenizer=self.components["tokenizer"],
            processor=self.components["processor"],
            device_name=config.trainer.device,
        )
        ray.get(rollouter.init_workers.remote())
        ray.get(rollouter.set_max_required_samples.remote())
        self.components["rollouter"] = rollouter

    def _create_trainer(self, config: Any) -> None:
        from verl.experimental.separation.utils import create_resource_pool_manager
        from verl.trainer.ppo.utils import Role

        roles = {role: cls for role, cls in self.components["role_worker_mapping"].items() if role != Role.Rollout}
        trainer = TRAINER.remote(
            config=config,
            tokenizer=self.components["tokenizer"],
            role_worker_mapping=roles,
            resource_pool_manager=create_resource_pool_manager(config, roles=list(roles)),
            ray_worker_group_cls=self.components["ray_worker_group_cls"],
            device_name=config.trainer.device,
        )
        ray.get(trainer.init_workers.remote())
        self.components["trainer"] = trainer


OmniFullyAsyncTaskRunner = ray.remote(num_cpus=1)(OmniFullyAsyncTask)
"""The task runner ``launch.run`` hands verl's ``run_ppo``."""
