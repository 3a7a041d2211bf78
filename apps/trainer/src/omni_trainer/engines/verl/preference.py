"""Offline preference optimisation (``algorithm.sample_source=offline``) on the verl engine.

verl's PPO trainer always starts rollout servers and a reward loop; a DPO run needs neither.
This driver runs in the launching process and starts only verl's actor workers on Ray:
verl's own ``ActorRolloutRefWorker`` in the ``actor`` role (FSDP, with our module through
:class:`~omni_verl.engine.OmniFSDPEngine`), plus one in the ``ref`` role for
full fine-tuning. Under LoRA the reference is the adapter-disabled base, through verl's
``no_lora_adapter`` switch. The preference loss enters through the worker's public
``set_loss_fn``.

The batch and the loss, which run in verl's workers, are :mod:`omni_verl.preference`'s.
A step is the local engine's (:mod:`omni_trainer.engines.local.tasks.preference`):
- the same pairs in the same order;
- reference log-probs computed once per pair and cached here;
- one optimizer step per ``ppo_mini_batch_size`` pairs;
- the same metrics and ``val/*`` names.

Chosen and rejected answers sit on adjacent rows. verl's ``force_group_size=2`` keeps each
pair in one micro-batch, and an even split keeps it on one rank. Checkpoints are verl's
(``global_step_<N>/actor``, ``latest_checkpointed_iteration.txt``), and so are the metrics
(verl's ``Tracking``, whose ``file`` logger :class:`~omni_trainer.engines.verl.progress.StepReporter`
follows).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from omni_training.preference import PREFERENCE_LOSSES, REFERENCE_FREE, ReferenceCache, validation_metrics
from omni_verl.preference import (
    METRIC_PREFIX,
    REFERENCE_KEY,
    answer_batch,
    preference_loss,
    row_sequence_log_probs,
    to_actor_format,
)

from omni_trainer.config import Config, ConfigError
from omni_trainer.engines.verl.async_training import total_steps
from omni_trainer.engines.verl.checkpoints import STEP_PREFIX, TRACKER
from omni_trainer.reporting import DROPPED_KEY
from omni_trainer.preference_pairs import (
    TRUNCATED_KEY,
    Pair,
    by_modality,
    load_pairs,
    preference_settings,
    step_pair_indices,
    validation_indices,
)

if TYPE_CHECKING:
    from tensordict import TensorDict  # type: ignore[import-untyped]


def pair_batch(pairs: Sequence[Pair], processor: Any, pad_token_id: int) -> TensorDict:
    """``pairs`` as verl's actor batch, each pair's chosen then rejected answer on adjacent rows."""
    rows = [(pair.prompt.inputs, answer) for pair in pairs for answer in (pair.chosen, pair.rejected)]
    return answer_batch(rows, processor, pad_token_id)

# --- the driver -------------------------------------------------------------------------------


class PreferenceRun:
    """verl's actor workers for an offline preference run, and its loop (see the module
    docstring). Built after ``ray.init``; :meth:`fit` trains, validates, saves and logs."""

    def __init__(self, config: Config, verl_config: DictConfig, processor: Any, run_dir: Path) -> None:
        self.config, self.verl_config, self.processor, self.run_dir = config, verl_config, processor, run_dir
        self.settings = preference_settings(config)
        self.loss_fn = PREFERENCE_LOSSES.get(self.settings.loss_type)
        self.reference = ReferenceCache(self.settings.loss_type in REFERENCE_FREE)
        self.lora = config.actor_rollout_ref.model.lora_rank > 0
        tokenizer = getattr(processor, "tokenizer", processor)
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else tokenizer.eos_token_id)
        self.train, self.val = load_pairs(config, processor, tokenizer)
        self.val_indices = validation_indices(config, self.val) if self.val is not None else []
        self.dp_size = config.trainer.nnodes * config.trainer.n_gpus_per_node
        actor = config.actor_rollout_ref.actor
        # pairs a micro-batch: at most a rank's share of an update, as verl-omni clamps it
        self.micro_pairs = min(actor.ppo_micro_batch_size_per_gpu, max(1, actor.ppo_mini_batch_size // self.dp_size))
        self.inference_multiple = self.dp_size * self.micro_pairs
        self.steps_per_epoch = len(self.train) // config.data.train_batch_size
        if self.steps_per_epoch == 0:
            raise ConfigError(
                f"Invalid configuration:\n  - data.train_batch_size={config.data.train_batch_size} exceeds the "
                f"{len(self.train)} preference pairs left after loading (see the dataset report above)"
            )
        self.total_steps = total_steps(config, len(self.train))

    # workers

    def start_workers(self) -> None:
        """verl's actor worker group (and reference worker group for full fine-tuning),
        colocated on one resource pool of ``trainer.nnodes x trainer.n_gpus_per_node`` ranks."""
        import ray
        from verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup, create_colocated_worker_cls
        from verl.single_controller.ray.base import ResourcePoolManager
        from verl.trainer.ppo.utils import Role
        from verl.workers.engine_workers import ActorRolloutRefWorker

        trainer = self.verl_config.trainer
        with open_dict(self.verl_config):  # the LR schedule's horizon (verl's trainer sets it from its dataloader)
            self.verl_config.actor_rollout_ref.actor.optim.total_training_steps = self.total_steps
        roles = [Role.Actor] if self.lora or self.reference.reference_free else [Role.Actor, Role.RefPolicy]
        mapping: dict[Any, str] = {role: "global_pool" for role in roles}  # verl keys it by Role (typed int)
        pools = ResourcePoolManager(
            resource_pool_spec={"global_pool": [trainer.n_gpus_per_node] * trainer.nnodes}, mapping=mapping,
        )
        pools.create_resource_pool()
        worker = ray.remote(ActorRolloutRefWorker)
        classes = {
            str(role): RayClassWithInitArgs(cls=worker, config=self.verl_config.actor_rollout_ref, role=str(role))
            for role in roles
        }
        group = RayWorkerGroup(
            resource_pool=pools.get_resource_pool(Role.Actor),
            ray_cls_with_init=create_colocated_worker_cls(class_dict=classes),
            device_name=trainer.device,
        )
        spawned = group.spawn(prefix_set=classes.keys())
        self.actor = spawned[str(Role.Actor)]
        self.ref = spawned.get(str(Role.RefPolicy))
        if self.ref is not None:
            self.ref.init_model()
        self.actor.init_model()
        self.actor.set_loss_fn(partial(preference_loss, self.settings))

    # log-probs

    def _meta(self) -> dict[str, Any]:
        return {
            "temperature": 1.0, "calculate_entropy": False, "force_group_size": 2,
            "micro_batch_size_per_gpu": self.micro_pairs,
        }

    def sequences(self, pairs: Sequence[Pair], *, reference: bool) -> torch.Tensor:
        """Every row's answer log-prob under the policy (or the reference), no gradient."""
        from verl.utils import tensordict_utils as tu

        batch = to_actor_format(pair_batch(pairs, self.processor, self.pad_token_id), compute_loss=False,
                                **self._meta())
        if reference and self.ref is not None:
            output = self.ref.compute_ref_log_prob(batch)
        else:
            if reference:
                tu.assign_non_tensor(batch, no_lora_adapter=True)
            output = self.actor.compute_log_prob(batch)
        return row_sequence_log_probs({"log_probs": output["log_probs"]}, batch, self.settings.average_log_prob)

    def references(self, pairs: Sequence[Pair]) -> tuple[torch.Tensor, torch.Tensor] | tuple[None, None]:
        """The pairs' reference log-probs (chosen, rejected), cached after the first time;
        ``None`` for a reference-free loss."""
        def score(wanted: list[Pair]) -> torch.Tensor:
            return self.sequences(_whole_pairs(wanted, self.inference_multiple), reference=True)[: 2 * len(wanted)]

        return self.reference.lookup(pairs, score)

    # the loop

    def step(self, step: int, pairs: list[Pair]) -> dict[str, float]:
        from verl.utils.metric import reduce_metrics

        started = time.perf_counter()
        actor = self.config.actor_rollout_ref.actor
        pairs = rank_major(pairs, self.dp_size, actor.ppo_mini_batch_size)
        ref_chosen, ref_rejected = self.references(pairs)
        batch = pair_batch(pairs, self.processor, self.pad_token_id)
        if ref_chosen is not None and ref_rejected is not None:
            batch[REFERENCE_KEY] = torch.stack([ref_chosen, ref_rejected], dim=1).reshape(-1)
        rows_per_update = 2 * actor.ppo_mini_batch_size
        batch = to_actor_format(
            batch, **self._meta(), global_batch_size=rows_per_update, mini_batch_size=rows_per_update,
            epochs=1, seed=self.config.data.seed, dataloader_kwargs={"shuffle": False},
        )
        output = self.actor.update_actor(batch)
        reduced = reduce_metrics(output["metrics"])
        metrics = {k.removeprefix(METRIC_PREFIX): float(v) for k, v in reduced.items() if k.startswith(METRIC_PREFIX)}
        modality = pairs[0].modality
        return {
            "step": float(step),
            **metrics,
            **{f"{modality}/{k}": v for k, v in metrics.items()},
            **{f"actor/{k}": float(v) for k, v in reduced.items() if not k.startswith(METRIC_PREFIX)},
            TRUNCATED_KEY: float(self.train.truncated),
            DROPPED_KEY: float(self.train.dropped),
            "timing_s/step": time.perf_counter() - started,
        }

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """verl-omni's ``val/*`` preference metrics over the validation pairs, overall and per
        modality (``val/<modality>/*``): the local engine's names."""
        if self.val is None or not self.val_indices:
            return {}
        parts: dict[str, tuple[Any, ...]] = {}
        for modality, group in by_modality([self.val[i] for i in self.val_indices]).items():
            scores = self.sequences(_whole_pairs(group, self.inference_multiple), reference=False)[: 2 * len(group)]
            parts[modality] = (scores[0::2], scores[1::2], *self.references(group))
        return validation_metrics(self.loss_fn, self.settings, parts)

    def fit(self, start_step: int, resume_from: Path | None = None) -> None:
        """Train from ``start_step`` to the last step; log each step through verl's
        ``Tracking`` (so the run's ``file`` logger records it) and save verl checkpoints.
        ``resume_from``: the run directory whose ``global_step_<start_step>`` to load."""
        from verl.utils.tracking import Tracking

        trainer = self.config.trainer
        tracking = Tracking(
            project_name=trainer.project_name, experiment_name=trainer.experiment_name,
            default_backend=list(self.verl_config.trainer.logger),
            config=OmegaConf.to_container(self.verl_config, resolve=True),
        )
        if start_step > 0:
            origin = resume_from or self.run_dir
            self.actor.load_checkpoint(str(origin / f"global_step_{start_step}" / "actor"))
        if trainer.val_before_train and start_step == 0:
            tracking.log(data=self.validate(), step=0)
        for step in range(start_step + 1, self.total_steps + 1):
            indices = step_pair_indices(self.config, self.train.modalities, step, self.steps_per_epoch)
            metrics = self.step(step, [self.train[i] for i in indices])
            metrics["training/global_step"] = float(step)
            if step == self.total_steps or (trainer.test_freq > 0 and step % trainer.test_freq == 0):  # as the local
                metrics.update(self.validate())
            if (trainer.save_freq > 0 and step % trainer.save_freq == 0) or step == self.total_steps:
                self.save(step)
            tracking.log(data=metrics, step=step)
        tracking.finish()

    def save(self, step: int) -> None:
        folder = self.run_dir / f"{STEP_PREFIX}{step}"
        self.actor.save_checkpoint(str(folder / "actor"), None, step,
                                   max_ckpt_to_keep=self.config.trainer.max_checkpoints_to_keep)
        (self.run_dir / TRACKER).write_text(str(step))


def rank_major(pairs: Sequence[Pair], ranks: int, per_update: int) -> list[Pair]:
    """``pairs`` reordered so that verl's split (rank r takes the r-th contiguous share, then
    its updates in order) gives update j the pairs ``[j * per_update, (j + 1) * per_update)``,
    as the local engine's updates take them. verl alone would give update j every rank's j-th
    share of its own contiguous block."""
    share = per_update // ranks
    updates = len(pairs) // per_update
    return [pairs[j * per_update + r * share + i] for r in range(ranks) for j in range(updates) for i in range(share)]


def _whole_pairs(pairs: Sequence[Pair], multiple: int) -> list[Pair]:
    """``pairs`` padded with repeats of the last to a multiple of ``multiple`` (verl splits a
    batch evenly over the ranks, then into micro-batches); the caller drops the extra rows."""
    padded = list(pairs)
    while len(padded) % multiple:
        padded.append(pairs[-1])
    return padded
