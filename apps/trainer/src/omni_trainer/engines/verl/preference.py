"""Offline preference optimisation (``algorithm.sample_source=offline``) on the verl engine.

verl's PPO trainer always starts rollout servers and a reward loop; a DPO run needs neither.
This driver runs in the launching process and starts only verl's actor workers on Ray:
verl's own ``ActorRolloutRefWorker`` in the ``actor`` role (FSDP, with our module through
:class:`~omni_verl.engine.OmniFSDPEngine`), plus one in the ``ref`` role for
full fine-tuning. Under LoRA the reference is the adapter-disabled base, through verl's
``no_lora_adapter`` switch. The preference loss enters through the worker's public
``set_loss_fn``.

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

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from omni_training.preference import (
    PREFERENCE_LOSSES,
    REFERENCE_FREE,
    PreferenceSettings,
    preference_metrics,
    sequence_log_probs,
)

from omni_trainer.config import Config, ConfigError
from omni_trainer.engines.verl.async_training import total_steps
from omni_trainer.engines.verl.checkpoints import STEP_PREFIX, TRACKER
from omni_trainer.reporting import DROPPED_KEY
from omni_trainer.preference_pairs import (
    TRUNCATED_KEY,
    Pair,
    ReferenceCache,
    by_modality,
    load_pairs,
    preference_settings,
    step_pair_indices,
    validation_indices,
    validation_metrics,
)

if TYPE_CHECKING:
    from tensordict import TensorDict  # type: ignore[import-untyped]

REFERENCE_KEY = "reference_sequence_log_probs"
"""Per row of an update batch: its answer's cached reference sequence log-prob."""
METRIC_PREFIX = "preference/"
"""What the loss function's metrics are sent under (verl adds its own ``loss`` and ``grad_norm``)."""


# --- the batch verl's actor reads -------------------------------------------------------------


def position_ids(processor: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, media: dict[str, Any]) -> torch.Tensor:
    """One row's position ids, as verl's agent loop computes them for the actor.

    With an mrope processor the shape is ``[1, 4, L]``: text positions, then the three mrope
    rows. Otherwise it is ``[1, L]``. ``media`` loses ``mm_token_type_ids``, which verl
    rebuilds per token.
    """
    if not hasattr(processor, "get_rope_index"):
        return (attention_mask.cumsum(-1) - 1).clamp(min=0) * attention_mask
    kwargs: dict[str, Any] = {"image_grid_thw": media.get("image_grid_thw"), "video_grid_thw": media.get("video_grid_thw")}
    if media.pop("mm_token_type_ids", None) is not None:
        from verl.utils.tokenizer import get_processor_token_id

        types = torch.zeros_like(input_ids)
        for kind, value in (("image", 1), ("video", 2)):
            token = get_processor_token_id(processor, kind)
            if token is not None:
                types[0][input_ids[0] == token] = value
        kwargs["mm_token_type_ids"] = types
    rope_kwargs = getattr(processor, "get_rope_index_kwargs", None)
    if rope_kwargs is not None:
        kwargs.update(rope_kwargs(media))
    mrope, _ = processor.get_rope_index(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    valid = attention_mask[0].bool()
    text = torch.ones((1, 1, input_ids.shape[1]), dtype=torch.long)
    text[0, 0, valid] = torch.arange(int(valid.sum()))
    return torch.cat((text, mrope.transpose(0, 1)), dim=1)


def pair_batch(pairs: Sequence[Pair], processor: Any, pad_token_id: int) -> TensorDict:
    """``pairs`` as verl's padded RL batch, each pair's chosen then rejected answer on adjacent
    rows: ``prompts`` left-padded, ``responses`` right-padded, ``input_ids``,
    ``attention_mask``, ``response_mask``, ``position_ids`` and ``multi_modal_inputs``, as
    verl's agent loop hands them to the actor (checked against it in
    ``tests/verl_cpu_harness.py``)."""
    from verl import DataProto

    rows = [(pair.prompt, answer) for pair in pairs for answer in (pair.chosen, pair.rejected)]
    prompt_width = max(int(p.inputs["attention_mask"].sum()) for p, _ in rows)
    answer_width = max(len(answer) for _, answer in rows)
    columns: dict[str, list[torch.Tensor]] = {k: [] for k in ("prompts", "responses", "response_mask", "input_ids",
                                                              "attention_mask", "position_ids")}
    media_rows = []
    for prepared, answer in rows:
        prompt = prepared.inputs["input_ids"][0][prepared.inputs["attention_mask"][0].bool()]
        left = torch.full((prompt_width - len(prompt),), pad_token_id, dtype=torch.long)
        right = torch.full((answer_width - len(answer),), pad_token_id, dtype=torch.long)
        prompt_ids = torch.cat([left, prompt])
        response = torch.cat([torch.tensor(answer, dtype=torch.long), right])
        response_mask = (torch.arange(answer_width) < len(answer)).long()
        attention = torch.cat([(torch.arange(prompt_width) >= len(left)).long(), response_mask])
        input_ids = torch.cat([prompt_ids, response])
        media = {k: v for k, v in prepared.inputs.items() if k not in ("input_ids", "attention_mask")}
        positions = position_ids(processor, input_ids[None], attention[None], dict(media))
        for key, value in (("prompts", prompt_ids), ("responses", response), ("response_mask", response_mask),
                           ("input_ids", input_ids), ("attention_mask", attention), ("position_ids", positions[0])):
            columns[key].append(value)
        media.pop("mm_token_type_ids", None)
        grid = media.get("image_grid_thw")
        if grid is not None:  # verl's agent loop adds each image's patch count (its FLOPs counter reads it)
            media["images_seqlens"] = torch.repeat_interleave(grid[:, 1] * grid[:, 2], grid[:, 0])
        media_rows.append(media)
    from tensordict import TensorDict

    batch = TensorDict({k: torch.stack(v) for k, v in columns.items()}, batch_size=len(rows))
    non_tensor = {"multi_modal_inputs": np.array(media_rows, dtype=object)}  # verl's agent loop: {} for text rows
    return DataProto(batch=batch, non_tensor_batch=non_tensor).to_tensordict()


def to_actor_format(batch: TensorDict, **meta: Any) -> TensorDict:
    """verl's no-padding form of ``batch`` (what its actor workers compute on), with ``meta``
    as non-tensor settings and the tokens per row verl's throughput metrics read."""
    from tensordict.tensorclass import NonTensorData  # type: ignore[import-untyped]
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    tokens = batch["attention_mask"].sum(-1).tolist()
    batch = left_right_2_no_padding(batch)
    tu.assign_non_tensor(batch, global_token_num=NonTensorData(tokens), **meta)
    return batch


# --- the loss, inside verl's actor workers ----------------------------------------------------


def row_sequence_log_probs(model_output: dict[str, Any], data: TensorDict, average: bool) -> torch.Tensor:
    """Each row's answer log-prob (summed, or averaged over its tokens) from the actor's
    no-padding token log-probs."""
    from verl.workers.utils.padding import no_padding_2_padding

    token_log_probs = no_padding_2_padding(model_output["log_probs"], data)
    mask = data.select("response_mask").to_padded_tensor()["response_mask"].to(token_log_probs.dtype)
    return sequence_log_probs(token_log_probs, mask, average=average)


def preference_loss(
    settings: PreferenceSettings, model_output: dict[str, Any], data: TensorDict, dp_group: Any = None
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The preference loss of one micro-batch, as verl's ``ppo_loss`` scales a loss: its pairs'
    share of the mini-batch mean, times the data-parallel size (FSDP averages gradients over
    ranks). Metrics: the micro-batch's means, under ``preference/`` and TRL's names."""
    from verl.utils.metric import AggregationType, Metric

    sequence = row_sequence_log_probs(model_output, data, settings.average_log_prob)
    chosen, rejected = sequence[0::2], sequence[1::2]
    if REFERENCE_KEY in data.keys():
        reference = data[REFERENCE_KEY].to(sequence)
        ref_chosen, ref_rejected = reference[0::2], reference[1::2]
    else:
        ref_chosen = ref_rejected = None
    out = PREFERENCE_LOSSES.get(settings.loss_type)(chosen, rejected, ref_chosen, ref_rejected, settings)
    pairs_in_mini_batch = int(data["global_batch_size"]) // 2
    loss = out.losses.sum() / pairs_in_mini_batch * int(data["dp_size"])
    means = preference_metrics(out, chosen, rejected)
    metrics = {f"{METRIC_PREFIX}{k}": Metric(AggregationType.MEAN, v) for k, v in means.items()}
    return loss, metrics


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
