"""One training step of the local engine, phase by phase:

rollout -> score -> old/ref (and teacher) log-probs -> advantages -> update.

Each phase is a function over a typed batch. Samples are grouped for the advantage
estimator by a fresh id per prompt of the step (as verl's ``uid``), never by a field of the
data: row numbers restart in every file, so two files would share them.

Between phases the step checks the stop flag (Ctrl-C): a step that has not reached the
update is discarded (:class:`StepDiscarded`), so nothing is trained on a step whose scoring
may have been cut short; an update that has begun finishes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from omni_contracts import RolloutAdapter, RolloutSample, TrainingAdapter
from omni_rewards import RewardManager
from omni_rollout.local_engine import LocalEngine
from omni_training.actor import Actor
from omni_training.advantages import AdvantageConfig, get_advantage_estimator
from omni_training.batching import MicroBatch, TeacherLogProbs, collate, plan_micro_batches
from omni_training.consistency import rollout_actor_consistency
from omni_training.distillation import Teacher
from omni_training.kl import kl_penalized_rewards
from omni_training.metrics import length_metrics

from omni_trainer.config import Config
from omni_trainer.prompts import Prepared
from omni_trainer.reward_guard import check_reward_failures
from omni_trainer.settings_builders import sampling_settings
from omni_trainer.speech_step import SpeechParts, score_speech, speech_rollouts


class StepDiscarded(Exception):
    """A stop was requested before the step reached its update; nothing was trained."""


@dataclass
class StepParts:
    """What the phases use: the run's config and its loaded components."""

    config: Config
    engine: LocalEngine | None  # None for a speech stage, which samples through its policy
    agent_loop: Callable[..., RolloutSample]
    rollout_adapter: RolloutAdapter
    mode: str
    training_adapter: TrainingAdapter
    tokenizer: Any
    rewards: RewardManager
    actor: Actor
    teacher: Teacher | None = None
    speech: SpeechParts | None = None  # set when the trained stage speaks (stage=talker)


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
    mask: torch.Tensor  # [B, T] response mask, padded to the longest response
    token_rewards: torch.Tensor  # [B, T] score on the last response token (minus KL if in reward)
    metrics: dict[str, float] = field(default_factory=dict)


def new_group_ids(count: int) -> list[str]:
    """One fresh id per prompt: unique for the run, whatever the data's own indices."""
    return [uuid.uuid4().hex for _ in range(count)]


def rollout_phase(parts: StepParts, prompts: Sequence[Prepared], step: int) -> Rollouts:
    rollout = parts.config.actor_rollout_ref.rollout
    if parts.speech is not None:
        return Rollouts(*speech_rollouts(
            parts.speech, prompts, new_group_ids(len(prompts)), n=rollout.n,
            max_new_tokens=parts.config.data.max_response_length, temperature=rollout.temperature,
        ))
    assert parts.engine is not None
    outputs = parts.engine.generate([p.inputs for p in prompts], sampling_settings(parts.config, step))
    samples: list[RolloutSample] = []
    owners: list[Prepared] = []
    group_ids: list[str] = []
    for prepared, group, prompt_rollout in zip(prompts, new_group_ids(len(prompts)), outputs, strict=True):
        for output in prompt_rollout.outputs:
            samples.append(parts.agent_loop(
                prompt_ids=prompt_rollout.prompt_ids, outputs=[output], adapter=parts.rollout_adapter,
                mode=parts.mode, specs=parts.training_adapter.extra_field_specs,
            ))
            owners.append(prepared)
            group_ids.append(group)
    return Rollouts(samples, owners, group_ids)


def score_phase(parts: StepParts, rollouts: Rollouts) -> Scores:
    if parts.speech is not None:
        speech_scores, metrics = score_speech(parts.speech, rollouts.owners)
        scores = torch.tensor(speech_scores, dtype=torch.float32)
        return Scores(scores, scores.clone(), metrics)
    texts = [parts.tokenizer.decode(s.response_ids, skip_special_tokens=True) for s in rollouts.samples]
    owners = rollouts.owners
    scored = parts.rewards.score_batch(
        [o.data_source for o in owners], texts, [o.ground_truth for o in owners], [o.extra_info or {} for o in owners],
    )
    scores = torch.tensor(scored.scores, dtype=torch.float32)
    accuracy = torch.tensor([o.result.get("acc", o.score) for o in scored.outcomes], dtype=torch.float32)
    return Scores(scores, accuracy, dict(scored.metrics), list(scored.errors))


def takes_old_log_probs_from_update(parts: StepParts, num_samples: int) -> bool:
    """Whether this step is on-policy, so its update's own forward gives the old log-probs
    (``actor.old_log_prob=auto``): one epoch over one mini-batch, and nothing needs the old
    log-probs before the update (no KL in the reward, no teacher)."""
    cfg = parts.config
    actor = cfg.actor_rollout_ref.actor
    return (
        actor.old_log_prob == "auto" and actor.ppo_epochs == 1
        and num_samples <= actor.ppo_mini_batch_size * cfg.actor_rollout_ref.rollout.n
        and not cfg.algorithm.use_kl_in_reward and parts.teacher is None
    )


def padded_log_probs(per_micro: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    return torch.cat([pad_cols(lp, width) for lp in per_micro])


def logprob_phase(parts: StepParts, rollouts: Rollouts, scores: Scores, *, on_policy: bool) -> TrainBatch:
    """Old log-probs (and the rollout/actor consistency) unless ``on_policy`` defers them to
    the update, teacher log-probs when distilling, reference log-probs when a KL term needs
    them, and the token-level rewards."""
    cfg = parts.config
    micro = micro_batches(parts, rollouts.samples, rollouts.owners)
    width = max(mb.responses.shape[1] for mb in micro)
    mask = torch.cat([pad_cols(mb.response_mask, width) for mb in micro]).float()
    metrics: dict[str, float] = {}
    actor_lp = None
    if not on_policy:
        old = parts.actor.compute_log_probs(micro)
        for mb, log_probs in zip(micro, old, strict=True):
            mb.old_log_probs = log_probs
        actor_lp = padded_log_probs(old, width)
        metrics.update(consistency_metrics(micro, width, mask))
    if parts.teacher is not None:
        assert actor_lp is not None  # a teacher makes the step off the on-policy shortcut
        started = time.perf_counter()
        metrics.update(teacher_phase(parts, rollouts, micro, actor_lp, mask))
        metrics["timing_s/teacher"] = time.perf_counter() - started
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
    return TrainBatch(micro, mask, token_rewards, metrics)


def consistency_metrics(micro: Sequence[MicroBatch], width: int, mask: torch.Tensor) -> dict[str, float]:
    """Rollout (sampling-time) vs actor (old) log-probs of the same tokens."""
    rollout_lp = padded_log_probs([mb.rollout_log_probs for mb in micro], width)  # type: ignore[misc]
    actor_lp = padded_log_probs([mb.old_log_probs for mb in micro], width)  # type: ignore[misc]
    return dict(rollout_actor_consistency(rollout_lp, actor_lp, mask))


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
    """The optimizer steps; on-policy, the single update also gives the old log-probs, and the
    rollout/actor consistency is measured on them."""
    if on_policy:
        metrics = parts.actor.update(batch.micro, on_policy=True)
        width = batch.mask.shape[1]
        return {**metrics, **consistency_metrics(batch.micro, width, batch.mask)}
    actor = parts.config.actor_rollout_ref.actor
    per_update = actor.ppo_mini_batch_size * parts.config.actor_rollout_ref.rollout.n
    metrics = {}
    for _ in range(actor.ppo_epochs):
        for group in group_micro_batches(batch.micro, per_update):
            metrics = parts.actor.update(group)
    return metrics


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
    rollouts = rollout_phase(parts, prompts, step)
    timed("gen", started)
    started = time.perf_counter()
    scores = score_phase(parts, rollouts)
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
    return {
        "step": float(step),
        "critic/score/mean": float(scores.scores.mean()),
        "critic/acc/mean": float(scores.accuracy.mean()),
        "critic/advantages/mean": float((advantages * mask).sum() / mask.sum().clamp(min=1)),
        **scores.metrics,
        **batch.metrics,
        **actor_metrics,
        **length_metrics(mask, max_response_length=parts.config.data.max_response_length),
        **timings,
        "timing_s/step": step_time,
        "perf/throughput_tokens_per_s": float(mask.sum()) / max(step_time, 1e-9),
        **(parts.engine.stats.metrics() if parts.engine is not None else {}),
    }


def teacher_phase(
    parts: StepParts, rollouts: Rollouts, micro: Sequence[MicroBatch], student_lp: torch.Tensor, mask: torch.Tensor,
) -> dict[str, float]:
    """Teacher log-probs of the sampled responses, in teacher-sized micro-batches, laid onto
    the actor's micro-batches; returns the ``distill/*`` metrics of the current policy."""
    assert parts.teacher is not None and parts.actor.settings.distillation is not None
    distill = parts.actor.settings.distillation
    size = parts.config.distillation.teacher_models.teacher_model.log_prob_micro_batch_size_per_gpu
    scored = parts.teacher.score(
        micro_batches(parts, rollouts.samples, rollouts.owners, size=size), topk=distill.topk if distill.uses_topk else None
    )
    width = mask.shape[1]
    log_probs = torch.cat([pad_cols(t.log_probs, width) for t in scored])
    topk_ids = topk_lp = None
    if distill.uses_topk:
        topk_ids = torch.cat([pad_rows_cols(t.topk_ids, width) for t in scored])
        topk_lp = torch.cat([pad_rows_cols(t.topk_log_probs, width) for t in scored])
    offset = 0
    for mb in micro:
        rows, cols = mb.responses.shape
        mb.teacher = TeacherLogProbs(
            log_probs[offset : offset + rows, :cols],
            None if topk_ids is None else topk_ids[offset : offset + rows, :cols],
            None if topk_lp is None else topk_lp[offset : offset + rows, :cols],
        )
        offset += rows
    tokens = mask.sum().clamp(min=1)
    return {
        # k1 on the student's own samples: the Monte-Carlo estimate of KL(student || teacher).
        "distill/kl_mean": float(((student_lp - log_probs) * mask).sum() / tokens),
        "distill/teacher_logprob_mean": float((log_probs * mask).sum() / tokens),
        "distill/student_logprob_mean": float((student_lp * mask).sum() / tokens),
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
            [s.response_mask for s in chunk], pad_token_id=parts.engine.pad_token_id if parts.engine else 0,
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


def pad_rows_cols(tensor: torch.Tensor | None, width: int) -> torch.Tensor:
    """``[B, T, k]`` -> ``[B, width, k]`` (pads the response axis)."""
    assert tensor is not None
    return torch.nn.functional.pad(tensor, (0, 0, 0, width - tensor.shape[1]))


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
