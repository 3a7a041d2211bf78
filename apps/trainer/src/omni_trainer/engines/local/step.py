"""One online RL step of the local engine, phase by phase:

rollout -> score -> old/ref (and the task's) log-probs -> advantages -> update.

The rollout and scoring are the task's (:class:`Sampler`: text, speech, distillation in
:mod:`omni_trainer.engines.local.tasks`); the rest is shared. Each phase is a function over a typed batch.
Samples are grouped for the advantage estimator by a fresh id per prompt of the step (as
verl's ``uid``), never by a field of the data: row numbers restart in every file, so two
files would share them.

Between phases the step checks the stop flag (Ctrl-C): a step that has not reached the
update is discarded (:class:`StepDiscarded`), so nothing is trained on a step whose scoring
may have been cut short; an update that has begun finishes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
import torch

from omni_contracts import RolloutSample, TrainingAdapter
from omni_training.actor import Actor
from omni_training.advantages import AdvantageConfig, get_advantage_estimator
from omni_training.batching import MicroBatch, collate, plan_micro_batches
from omni_training.consistency import rollout_actor_consistency
from omni_training.kl import kl_penalized_rewards
from omni_training.metrics import length_metrics
from omni_training.rollout_correction import METRIC_PREFIX, CorrectionSettings, correct, off_policy_metrics

from omni_trainer.config import Config
from omni_trainer.prompts import Prepared
from omni_training.run_guards import check_reward_failures
from omni_training.run_guards import SKIPPED_KEY
from omni_trainer.settings_builders import correction_settings


class StepDiscarded(Exception):
    """A stop was requested before the step reached its update; nothing was trained."""


@dataclass
class Rollouts:
    """The step's samples: ``n`` per prompt, each with its prompt and its group id."""

    samples: list[RolloutSample]
    owners: list[Prepared]
    group_ids: list[str]


@dataclass
class Scores:
    scores: torch.Tensor  # [B]
    accuracy: torch.Tensor  # [B]
    metrics: dict[str, float]
    errors: list[str] = field(default_factory=list)  # the first failures' messages

    @property
    def failed(self) -> int:
        """Samples whose scorer raised or timed out (they score 0)."""
        return int(self.metrics.get("reward/errors", 0.0) + self.metrics.get("reward/timeouts", 0.0))


@dataclass
class TrainBatch:
    """The step's samples as actor micro-batches, with the step-level tensors."""

    micro: list[MicroBatch]
    mask: torch.Tensor  # [B, T] response mask, padded to the longest response; without rejected tokens
    token_rewards: torch.Tensor  # [B, T] score on the last response token (minus KL if in reward)
    metrics: dict[str, float] = field(default_factory=dict)
    sampled_mask: torch.Tensor | None = None  # [B, T] before rollout correction's rejection (None: mask)


class Sampler:
    """What an online task gives the step: its samples and their scores."""

    reads_old_log_probs = False
    """Something before the update reads the old log-probs (:meth:`log_prob_extras`)."""

    def rollout(self, prompts: Sequence[Prepared], step: int) -> Rollouts:
        """``n`` samples per prompt, grouped by :func:`new_group_ids`."""
        raise NotImplementedError

    def score(self, rollouts: Rollouts) -> Scores:
        raise NotImplementedError

    def log_prob_extras(
        self, parts: StepParts, rollouts: Rollouts, micro: Sequence[MicroBatch], old_log_probs: torch.Tensor | None,
        mask: torch.Tensor,
    ) -> dict[str, float]:
        """What the task adds to the micro-batches once the old log-probs are known (a
        teacher's log-probs); returns its metrics."""
        return {}

    def rollout_metrics(self) -> dict[str, float]:
        """The sampler's own counters (the engine's), reported every step."""
        return {}


@dataclass
class StepParts:
    """What the phases use: the run's config, the task's sampler and the actor."""

    config: Config
    sampler: Sampler
    actor: Actor
    training_adapter: TrainingAdapter
    pad_token_id: int = 0


def new_group_ids(count: int) -> list[str]:
    """One fresh id per prompt: unique for the run, whatever the data's own indices."""
    return [uuid.uuid4().hex for _ in range(count)]


def takes_old_log_probs_from_update(parts: StepParts, num_samples: int) -> bool:
    """Whether this step is on-policy, so its update's own forward gives the old log-probs
    (``actor.old_log_prob=auto``): one epoch over one mini-batch, and nothing needs the old
    log-probs before the update (no KL in the reward, no teacher)."""
    cfg = parts.config
    actor = cfg.actor_rollout_ref.actor
    correction = correction_settings(cfg)
    return (
        actor.old_log_prob == "auto" and actor.ppo_epochs == 1
        and num_samples <= actor.ppo_mini_batch_size * cfg.actor_rollout_ref.rollout.n
        and not cfg.algorithm.use_kl_in_reward and not parts.sampler.reads_old_log_probs
        and not correction.corrects and not correction.bypass_mode
    )


def padded_log_probs(per_micro: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    return torch.cat([pad_cols(lp, width) for lp in per_micro])


def logprob_phase(parts: StepParts, rollouts: Rollouts, scores: Scores, *, on_policy: bool) -> TrainBatch:
    """Old log-probs (and the rollout/actor consistency) unless ``on_policy`` defers them to
    the update (in rollout correction's bypass mode they are the rollout's), the task's (a
    teacher's when distilling), reference log-probs when a KL term needs them, the
    token-level rewards, and rollout correction's weights and rejection."""
    cfg = parts.config
    correction = correction_settings(cfg)
    micro = micro_batches(parts, rollouts.samples, rollouts.owners)
    width = max(mb.responses.shape[1] for mb in micro)
    mask = torch.cat([pad_cols(mb.response_mask, width) for mb in micro]).float()
    metrics: dict[str, float] = {}
    actor_lp = None
    if correction.bypass_mode:
        require_rollout_log_probs(rollouts.samples, "rollout correction's bypass_mode")
        for mb in micro:
            mb.old_log_probs = mb.rollout_log_probs
        actor_lp = padded_log_probs([mb.rollout_log_probs for mb in micro], width)  # type: ignore[misc]
    elif not on_policy:
        old = parts.actor.compute_log_probs(micro)
        for mb, log_probs in zip(micro, old, strict=True):
            mb.old_log_probs = log_probs
        actor_lp = padded_log_probs(old, width)
        metrics.update(consistency_metrics(micro, width, mask))
    metrics.update(parts.sampler.log_prob_extras(parts, rollouts, micro, actor_lp, mask))
    token_rewards = torch.zeros_like(mask)
    lengths = mask.sum(dim=-1).long()
    token_rewards[torch.arange(len(rollouts.samples)), (lengths - 1).clamp(min=0)] = scores.scores
    if cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward:
        refs = parts.actor.compute_log_probs(micro, reference=True)
        for mb, ref in zip(micro, refs, strict=True):
            mb.ref_log_probs = ref
        if cfg.algorithm.use_kl_in_reward:
            assert actor_lp is not None  # a KL reward makes the step off the on-policy shortcut
            ref_lp = padded_log_probs(refs, width)
            token_rewards, mean_kl = kl_penalized_rewards(
                token_rewards, actor_lp, ref_lp, mask, coef=cfg.algorithm.kl_ctrl.kl_coef, mode=cfg.algorithm.kl_penalty
            )
            metrics["actor/reward_kl_penalty"] = float(mean_kl)
    if correction.corrects and not correction.bypass_mode:
        require_rollout_log_probs(rollouts.samples, "rollout correction (rollout_is, rollout_rs)")
        kept, corrected = apply_rollout_correction(micro, width, mask, correction)
        return TrainBatch(micro, kept, token_rewards, {**metrics, **corrected}, sampled_mask=mask)
    return TrainBatch(micro, mask, token_rewards, metrics)


def require_rollout_log_probs(samples: Sequence[RolloutSample], what: str) -> None:
    """Rollout correction compares the rollout's log-probs with the actor's: a sample without
    them would be compared with zeros."""
    missing = sum(sample.response_logprobs is None for sample in samples)
    if missing:
        raise ValueError(
            f"{what} needs the rollout's log-probs of every sample; {missing} of {len(samples)} came without them"
        )


def apply_rollout_correction(
    micro: Sequence[MicroBatch], width: int, mask: torch.Tensor, settings: CorrectionSettings
) -> tuple[torch.Tensor, dict[str, float]]:
    """Decoupled rollout correction over the whole step (as verl computes it once per batch):
    the old log-probs against the rollout's, the weights laid onto the micro-batches and the
    rejected tokens taken out of their masks. Returns the step's mask without them and the
    ``rollout_corr/*`` metrics."""
    rollout_lp = padded_log_probs([mb.rollout_log_probs for mb in micro], width)  # type: ignore[misc]
    actor_lp = padded_log_probs([mb.old_log_probs for mb in micro], width)  # type: ignore[misc]
    correction = correct(actor_lp, rollout_lp, mask, settings)
    offset = 0
    for mb in micro:
        rows, cols = mb.responses.shape
        mb.response_mask = correction.mask[offset : offset + rows, :cols].to(mb.response_mask.dtype)
        if correction.weights is not None:
            mb.rollout_is_weights = correction.weights[offset : offset + rows, :cols].float()
        offset += rows
    return correction.mask, correction.metrics


def consistency_metrics(micro: Sequence[MicroBatch], width: int, mask: torch.Tensor) -> dict[str, float]:
    """Rollout (sampling-time) vs actor (old) log-probs of the same tokens: their agreement,
    and verl's off-policy metrics (``rollout_corr/kl``, perplexities, chi^2), which verl logs
    whether or not correction is on."""
    rollout_lp = padded_log_probs([mb.rollout_log_probs for mb in micro], width)  # type: ignore[misc]
    actor_lp = padded_log_probs([mb.old_log_probs for mb in micro], width)  # type: ignore[misc]
    off_policy = {f"{METRIC_PREFIX}{name}": value for name, value in off_policy_metrics(actor_lp, rollout_lp, mask).items()}
    return {**rollout_actor_consistency(rollout_lp, actor_lp, mask), **off_policy}


def advantage_phase(parts: StepParts, rollouts: Rollouts, batch: TrainBatch) -> torch.Tensor:
    """Advantages ``[B, T]`` over each prompt's group, laid onto the micro-batches."""
    algorithm = parts.config.algorithm
    advantages = get_advantage_estimator(algorithm.adv_estimator)(
        token_level_rewards=batch.token_rewards, response_mask=batch.mask, index=rollouts.group_ids,
        config=AdvantageConfig(norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo, gamma=algorithm.gamma),
    ).advantages
    offset = 0
    for mb in batch.micro:
        rows, cols = mb.responses.shape
        mb.advantages = advantages[offset : offset + rows, :cols]
        offset += rows
    return advantages


def update_phase(parts: StepParts, batch: TrainBatch, *, on_policy: bool) -> dict[str, float]:
    """The optimizer steps, then the learning-rate schedule's step (once a training step, as
    verl's); on-policy, the single update also gives the old log-probs, and the rollout/actor
    consistency is measured on them."""
    metrics = _updates(parts, batch, on_policy=on_policy)
    parts.actor.end_step()
    return metrics


def _updates(parts: StepParts, batch: TrainBatch, *, on_policy: bool) -> dict[str, float]:
    if on_policy:
        single = parts.actor.update(batch.micro, on_policy=True)
        width = batch.mask.shape[1]
        return {**single, **consistency_metrics(batch.micro, width, batch.mask)}
    actor = parts.config.actor_rollout_ref.actor
    per_update = actor.ppo_mini_batch_size * parts.config.actor_rollout_ref.rollout.n
    metrics: dict[str, float] = {}
    skipped: list[float] = []
    for _ in range(actor.ppo_epochs):
        for group in group_micro_batches(batch.micro, per_update):
            metrics = parts.actor.update(group)
            skipped.append(metrics[SKIPPED_KEY])
    # the last update's metrics, and the share of the step's updates that were skipped
    return {**metrics, SKIPPED_KEY: sum(skipped) / len(skipped)} if skipped else metrics


def train_step(
    parts: StepParts, step: int, prompts: Sequence[Prepared], stop_requested: Callable[[], bool] = lambda: False
) -> dict[str, float]:
    """One step; returns its metrics.

    Raises:
        StepDiscarded: ``stop_requested()`` turned true before the update began.
        RewardFailureError: the scorer failed on more than ``reward.max_error_rate`` of the
            samples (nothing was trained).
    """
    timings: dict[str, float] = {}

    def timed(name: str, started: float) -> None:
        timings[f"timing_s/{name}"] = time.perf_counter() - started
        if stop_requested() and name in ("gen", "reward", "old_log_prob"):
            raise StepDiscarded(f"step {step} discarded after its {name} phase")

    started = time.perf_counter()
    rollouts = parts.sampler.rollout(prompts, step)
    timed("gen", started)
    started = time.perf_counter()
    scores = parts.sampler.score(rollouts)
    timed("reward", started)
    check_reward_failures(
        step, scores.failed, len(scores.scores), parts.config.reward.max_error_rate, scores.errors,
        run_dir=parts.config.trainer.default_local_dir,
    )
    started = time.perf_counter()
    on_policy = takes_old_log_probs_from_update(parts, len(rollouts.samples))
    batch = logprob_phase(parts, rollouts, scores, on_policy=on_policy)
    advantages = advantage_phase(parts, rollouts, batch)
    timed("old_log_prob", started)
    started = time.perf_counter()
    actor_metrics = update_phase(parts, batch, on_policy=on_policy)
    timed("update_actor", started)
    step_time = sum(timings.values())
    mask = batch.mask
    sampled = batch.sampled_mask if batch.sampled_mask is not None else mask
    return {
        "step": float(step),
        "critic/score/mean": float(scores.scores.mean()),
        "critic/acc/mean": float(scores.accuracy.mean()),
        "critic/advantages/mean": float((advantages * mask).sum() / mask.sum().clamp(min=1)),
        **scores.metrics,
        **batch.metrics,
        **actor_metrics,
        **length_metrics(sampled, max_response_length=parts.config.data.max_response_length),
        **timings,
        "timing_s/step": step_time,
        "perf/throughput_tokens_per_s": float(sampled.sum()) / max(step_time, 1e-9),
        **parts.sampler.rollout_metrics(),
    }


def micro_batches(
    parts: StepParts, samples: Sequence[RolloutSample], owners: Sequence[Prepared], *, size: int | None = None
) -> list[MicroBatch]:
    """Consecutive samples per micro-batch: ``size`` rows, else the actor's count, or a
    padded-token budget with ``use_dynamic_bsz`` (``ppo_max_token_len_per_gpu``)."""
    actor = parts.config.actor_rollout_ref.actor
    if size is None and actor.use_dynamic_bsz:
        lengths = [int(o.inputs["input_ids"].shape[1]) + len(s.response_ids) for s, o in zip(samples, owners, strict=True)]
        groups = plan_micro_batches(lengths, max_tokens=actor.ppo_max_token_len_per_gpu, max_rows=None)
    else:
        size = size or actor.ppo_micro_batch_size_per_gpu
        groups = [list(range(start, min(start + size, len(samples)))) for start in range(0, len(samples), size)]
    batches = []
    for group in groups:
        chunk = [samples[i] for i in group]
        inputs, responses, mask = collate(
            [owners[i].inputs for i in group], [s.response_ids for s in chunk],
            [s.response_mask for s in chunk], pad_token_id=parts.pad_token_id,
        )
        rollout_lp = torch.zeros(mask.shape, dtype=torch.float32)
        for row, sample in enumerate(chunk):
            if sample.response_logprobs is not None:
                rollout_lp[row, : len(sample.response_logprobs)] = torch.tensor(sample.response_logprobs)
        # A field some sample lacks is left out: the adapter's validation names it.
        extra = {
            key: [s.extra_fields[key] for s in chunk]
            for key in parts.training_adapter.extra_field_specs
            if all(key in s.extra_fields for s in chunk)
        }
        batches.append(MicroBatch(inputs, responses, mask, rollout_log_probs=rollout_lp, extra=extra))
    return batches


def pad_cols(tensor: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(tensor, (0, width - tensor.shape[1]))


def group_micro_batches(micro: Sequence[MicroBatch], samples_per_update: int) -> list[list[MicroBatch]]:
    groups: list[list[MicroBatch]] = [[]]
    count = 0
    for mb in micro:
        if count >= samples_per_update and groups[-1]:
            groups.append([])
            count = 0
        groups[-1].append(mb)
        count += mb.responses.shape[0]
    return groups
