"""The actor: log-probs for rollout data and policy-gradient updates of the policy.

One :meth:`Actor.update` call is one optimizer step over a mini-batch given as
micro-batches (gradient accumulation). Losses are aggregated with mini-batch totals, so the
accumulated gradient equals that of one big batch. Reference log-probs come from the same
module with its LoRA adapter disabled (no second copy of the weights) or, for
full-parameter training, from a frozen copy made on first use.

The model may sit on a GPU: each micro-batch moves to the model's device when it is used
(one at a time, so only one micro-batch's inputs occupy the device), and the log-probs
come back to the CPU, where the step's other tensors live.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from omni_contracts import LogitMask, TrainingAdapter
from omni_training.aggregation import aggregate_loss
from omni_training.batching import MicroBatch, adapter_model_inputs
from omni_training.distillation import distillation_loss
from omni_training.kl import kl_estimate
from omni_training.logit_mask import mask_policy_logits
from omni_training.logprobs import ResponseLogProbs, response_log_probs
from omni_training.model_loading import load_policy, precision
from omni_training.policy_loss import BatchCounts, PolicyLossOutput, get_policy_loss, reinforce_loss
from omni_training.rollout_correction import correct
from omni_training.settings import ActorSettings, LoraSettings, OptimizerSettings


Objective = Callable[[MicroBatch, Tensor], tuple[Tensor, dict[str, float]]]
"""``(micro-batch, its policy log-probs [B, T]) -> (its share of the loss, metrics to sum)``."""


@dataclass(frozen=True)
class Regularizer:
    """A term added to every update's loss: ``coef * loss(model)``, a scalar computed on the
    policy module itself (not on the samples), reported as ``actor/<name>``."""

    name: str
    coef: float
    loss: Callable[[Any], Tensor]


class Actor:
    """Owns the policy module, its optimizer and its LR schedule."""

    def __init__(
        self,
        model: Any,
        adapter: TrainingAdapter,
        model_config: Any,
        settings: ActorSettings,
        optim: OptimizerSettings,
        *,
        keep_reference: bool | None = None,
    ) -> None:
        self.model = model
        self.adapter = adapter
        self.model_config = model_config
        self.settings = settings
        self.optim_settings = optim
        self.loss_fn = get_policy_loss(settings.loss_mode)
        self.uses_lora = hasattr(model, "disable_adapter") and hasattr(model, "peft_config")
        # A full fine-tune's weights are float32 (master weights); its forward computes in
        # ``settings.dtype`` under autocast (``None``: in the weights' own dtype).
        self.autocast_dtype = precision(settings.dtype, lora=self.uses_lora).autocast
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        if not self.trainable:
            raise ValueError("The policy has no trainable parameters; check LoRA targets and freezing.")
        self.optimizer = torch.optim.AdamW(
            self.trainable, lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.steps = 0
        self.regularizers: list[Regularizer] = []
        # Full-parameter training needs a frozen copy of the initial weights for reference
        # log-probs; it is made now, before any update, and only when asked for (KL loss).
        keep = settings.use_kl_loss if keep_reference is None else keep_reference
        self._reference: Any = (
            copy.deepcopy(model).eval().requires_grad_(False) if keep and not self.uses_lora else None
        )

    def mask_logits(self, mask: LogitMask) -> None:
        """Score the distribution the rollout samples from: the ids ``mask`` forbids are
        masked in the forward of the policy and of its reference (:mod:`omni_training.logit_mask`)."""
        for module in (self.model, self._reference):
            if module is not None:
                mask_policy_logits(module, mask)

    @classmethod
    def from_pretrained(
        cls,
        model_path: str,
        adapter: TrainingAdapter,
        *,
        settings: ActorSettings,
        lora: LoraSettings,
        optim: OptimizerSettings,
        keep_reference: bool | None = None,
    ) -> Actor:
        model, config = load_policy(
            model_path, adapter, lora, dtype=settings.dtype, device=settings.device,
            gradient_checkpointing=settings.gradient_checkpointing,
        )
        return cls(model, adapter, config, settings, optim, keep_reference=keep_reference)

    def _lr_factor(self, step: int) -> float:
        optim = self.optim_settings
        if step < optim.warmup_steps:
            return (step + 1) / optim.warmup_steps
        if optim.schedule == "constant" or not optim.total_steps:
            return 1.0
        progress = min(1.0, (step - optim.warmup_steps) / max(1, optim.total_steps - optim.warmup_steps))
        cosine = 0.5 * (1 + math.cos(math.pi * progress))
        return optim.min_lr_ratio + (1 - optim.min_lr_ratio) * cosine

    @property
    def device(self) -> torch.device:
        """The device of the policy's parameters (micro-batches are moved there)."""
        return next(self.model.parameters()).device

    def _on_device(self, batch: MicroBatch) -> MicroBatch:
        """``batch`` on the model's device, its media features in the model's dtype."""
        return batch.to(self.device, float_dtype=model_float_dtype(self.model))

    def _forward(
        self, module: Any, batch: MicroBatch, *, with_entropy: bool, gather_ids: Tensor | None = None
    ) -> ResponseLogProbs:
        with self.autocast():
            return response_log_probs(
                module, adapter_model_inputs(batch, self.adapter, self.model_config), batch.responses,
                temperature=self.settings.temperature, with_entropy=with_entropy,
                entropy_grad=bool(self.settings.entropy_coeff), gather_ids=gather_ids,
            )

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The policy's compute precision for a forward on its module (the actor's own, and
        the local rollout's): autocast to ``autocast_dtype`` when set, else nothing."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    @contextlib.contextmanager
    def _reference_module(self) -> Iterator[Any]:
        if self.uses_lora:
            with self.model.disable_adapter():
                yield self.model
            return
        if self._reference is not None:
            yield self._reference
        elif self.steps == 0:
            yield self.model  # nothing has been updated yet: the policy is the reference
        else:
            raise ValueError(
                "Reference log-probs of a full-parameter actor need a copy of the initial weights, "
                "kept only with use_kl_loss or keep_reference=True."
            )

    @torch.no_grad()
    def compute_log_probs(
        self, batches: Sequence[MicroBatch], *, reference: bool = False
    ) -> list[Tensor]:
        """Log-probs ``[B, T]`` per micro-batch under the current (or reference) policy."""
        was_training = self.model.training
        self.model.eval()
        try:
            with contextlib.ExitStack() as stack:
                module = stack.enter_context(self._reference_module()) if reference else self.model
                return [
                    self._forward(module, self._on_device(b), with_entropy=False).log_probs.cpu() for b in batches
                ]
        finally:
            self.model.train(was_training)

    def update(self, batches: Sequence[MicroBatch], *, on_policy: bool = False) -> dict[str, float]:
        """One optimizer step over ``batches``; returns the ``actor/*`` metrics.

        ``on_policy``: ``batches`` are all the samples of this policy version and this is
        their only update, so the old log-probs are the update's own forward, detached
        (importance ratio exactly 1, as a separate pass would give up to float rounding).
        They are written to each micro-batch's ``old_log_probs`` (on the CPU), which must be
        ``None`` on entry.
        """
        settings = self.settings
        counts = _counts(batches, settings.policy_loss.loss_scale_factor)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        distill = settings.distillation
        totals = {
            "pg_loss": 0.0, "kl_loss": 0.0, "entropy": 0.0, "clipfrac": 0.0, "ppo_kl": 0.0,
            "clipfrac_lower": 0.0, "distill_loss": 0.0,
        }
        correction_totals: dict[str, float] = {}  # bypass mode's rollout_corr/*, a mean over micro-batches
        started = time.perf_counter()
        for given in batches:
            if on_policy and given.old_log_probs is not None:
                raise ValueError("an on-policy update computes old_log_probs itself; they were already set.")
            batch = self._on_device(given)
            if (batch.old_log_probs is None and not on_policy) or batch.advantages is None:
                raise ValueError("update needs old_log_probs (or on_policy=True) and advantages on every micro-batch.")
            mask = batch.response_mask.to(torch.float32)
            gather_ids = None
            if distill is not None:
                if batch.teacher is None:
                    raise ValueError("Distillation is on but a micro-batch has no teacher log-probs.")
                gather_ids = batch.teacher.topk_ids if distill.uses_topk else None
            out = self._forward(self.model, batch, with_entropy=True, gather_ids=gather_ids)
            old_log_probs = out.log_probs.detach() if on_policy else batch.old_log_probs
            assert old_log_probs is not None
            if on_policy:
                given.old_log_probs = old_log_probs.cpu()
            if settings.bypass_correction is not None:
                pg, corrected = self._bypass_policy_loss(batch, out.log_probs, mask, counts)
                for name, value in corrected.items():
                    correction_totals[name] = correction_totals.get(name, 0.0) + value / len(batches)
            else:
                weights = {} if batch.rollout_is_weights is None else {"rollout_is_weights": batch.rollout_is_weights}
                pg = self.loss_fn(
                    old_log_prob=old_log_probs, log_prob=out.log_probs, advantages=batch.advantages,
                    response_mask=mask, config=settings.policy_loss, counts=counts, **weights,
                )
            loss = pg.loss
            if distill is not None:
                assert batch.teacher is not None
                distill_loss, _ = distillation_loss(
                    student_log_probs=out.log_probs, old_log_probs=old_log_probs, teacher=batch.teacher,
                    response_mask=mask, settings=distill, loss_agg_mode=settings.policy_loss.loss_agg_mode,
                    counts=counts, student_topk_log_probs=out.gathered_log_probs,
                )
                if distill.use_task_rewards:
                    loss = loss + distill.distillation_loss_coef * distill_loss
                else:
                    loss = distill_loss
                totals["distill_loss"] += float(distill_loss.detach())
            assert out.entropy is not None
            entropy = aggregate_loss(out.entropy, mask, "token-mean", num_tokens=counts.num_tokens)
            if settings.entropy_coeff:
                loss = loss - settings.entropy_coeff * entropy
            if settings.use_kl_loss:
                if batch.ref_log_probs is None:
                    raise ValueError("use_kl_loss is on but a micro-batch has no ref_log_probs.")
                kl = aggregate_loss(
                    kl_estimate(out.log_probs, batch.ref_log_probs, settings.kl_loss_type),
                    mask, settings.policy_loss.loss_agg_mode,
                    num_tokens=counts.num_tokens, num_sequences=counts.num_sequences, horizon=counts.horizon,
                )
                loss = loss + settings.kl_loss_coef * kl
                totals["kl_loss"] += float(kl.detach())
            loss.backward()
            share = batch.num_tokens / max(1.0, float(counts.num_tokens or 1))
            totals["pg_loss"] += float(pg.loss.detach())
            totals["entropy"] += float(entropy.detach())
            totals["clipfrac"] += float(pg.clipfrac.detach()) * share
            totals["ppo_kl"] += float(pg.ppo_kl.detach()) * share
            totals["clipfrac_lower"] += float(pg.clipfrac_lower.detach()) * share
        return {
            "actor/pg_loss": totals["pg_loss"],
            "actor/kl_loss": totals["kl_loss"],
            "actor/entropy": totals["entropy"],
            "actor/pg_clipfrac": totals["clipfrac"],
            "actor/ppo_kl": totals["ppo_kl"],
            "actor/pg_clipfrac_lower": totals["clipfrac_lower"],
            **({"actor/distill_loss": totals["distill_loss"]} if distill is not None else {}),
            **correction_totals,
            **self._optimizer_step(started, float(counts.num_tokens or 0)),
        }

    def _bypass_policy_loss(
        self, batch: MicroBatch, log_probs: Tensor, mask: Tensor, counts: BatchCounts
    ) -> tuple[PolicyLossOutput, dict[str, float]]:
        """Rollout correction in bypass mode (the old log-probs are the rollout's): the weights
        and rejection of the current policy against the rollout, then the policy loss on the
        kept tokens -- the configured loss, whose ratio already is ``pi / pi_rollout`` (the
        weights are only measured), or REINFORCE with the weights (``loss_type=reinforce``)."""
        settings = self.settings.bypass_correction
        assert settings is not None and batch.advantages is not None
        if batch.rollout_log_probs is None:
            raise ValueError("rollout correction's bypass mode needs the rollout's log-probs on every micro-batch.")
        correction = correct(log_probs.detach(), batch.rollout_log_probs, mask, settings)
        kept = correction.mask.to(mask.dtype)
        if settings.loss_type == "reinforce":
            pg = reinforce_loss(
                rollout_log_prob=batch.rollout_log_probs, log_prob=log_probs, advantages=batch.advantages,
                response_mask=kept, config=self.settings.policy_loss, counts=counts,
                rollout_is_weights=correction.weights,
            )
        else:
            pg = self.loss_fn(
                old_log_prob=batch.rollout_log_probs, log_prob=log_probs, advantages=batch.advantages,
                response_mask=kept, config=self.settings.policy_loss, counts=counts,
            )
        return pg, correction.metrics

    def end_step(self) -> None:
        """Advance the learning-rate schedule by one training step, after the step's last update.
        Warm-up and the cosine horizon count training steps, as verl's do (its engine steps the
        schedule once a step, after the last mini-batch), not optimizer steps: with several
        mini-batches a step, counting updates would warm up and decay that many times faster."""
        self.scheduler.step()

    def update_objective(self, batches: Sequence[MicroBatch], objective: Objective) -> dict[str, float]:
        """One optimizer step minimising ``objective`` summed over ``batches`` (gradient
        accumulation): an objective that is not a policy gradient (a preference loss). It
        is called with each micro-batch and the policy's log-probs ``[B, T]`` of its
        responses, and returns its share of the loss and the metrics to sum; returns those
        sums as ``actor/<name>`` with the optimizer's metrics."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        totals: dict[str, float] = {}
        started = time.perf_counter()
        for given in batches:
            batch = self._on_device(given)
            loss, metrics = objective(batch, self._forward(self.model, batch, with_entropy=False).log_probs)
            loss.backward()
            for name, value in metrics.items():
                totals[name] = totals.get(name, 0.0) + value
        tokens = float(sum(b.num_tokens for b in batches))
        return {**{f"actor/{k}": v for k, v in totals.items()}, **self._optimizer_step(started, tokens)}

    def _optimizer_step(self, started: float, tokens: float) -> dict[str, float]:
        """The regularizers' gradients, clipping, the step (skipped on a non-finite gradient
        norm) and the schedule; returns their metrics."""
        regularized: dict[str, float] = {}
        for regularizer in self.regularizers:
            with self.autocast():
                value = regularizer.loss(self.model)
            (regularizer.coef * value).backward()
            regularized[f"actor/{regularizer.name}"] = float(value.detach())
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.trainable, self.optim_settings.grad_clip))
        stepped = math.isfinite(grad_norm)
        if stepped:
            self.optimizer.step()
        self.steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        lr = float(self.scheduler.get_last_lr()[0])
        elapsed = time.perf_counter() - started
        return {
            **regularized,
            "actor/grad_norm": grad_norm,
            "actor/lr": lr,
            "actor/skipped_step": float(not stepped),
            "perf/update_time_s": elapsed,
            "perf/update_tokens_per_s": tokens / max(elapsed, 1e-9),
        }


def model_float_dtype(model: Any) -> torch.dtype:
    """The dtype of the model's input embeddings: what its (frozen, bf16 on a GPU) layers
    compute in, even where PEFT keeps LoRA weights in fp32."""
    dtype: torch.dtype = model.get_input_embeddings().weight.dtype
    return dtype


def _counts(batches: Sequence[MicroBatch], loss_scale_factor: int | None = None) -> BatchCounts:
    tokens = sum(b.num_tokens for b in batches)
    sequences = sum(int((b.response_mask.sum(dim=-1) > 0).sum()) for b in batches)
    horizon = loss_scale_factor or max(int(b.responses.shape[1]) for b in batches)
    return BatchCounts(num_tokens=float(tokens), num_sequences=float(sequences), horizon=float(horizon))
