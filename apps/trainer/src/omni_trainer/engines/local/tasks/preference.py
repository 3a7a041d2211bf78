"""Offline preference optimisation on the local engine: DPO and its family on preference pairs
(:mod:`omni_trainer.preference_pairs`), verl-omni's Omni-Preference form.

A step takes ``data.train_batch_size`` pairs of one modality, scores each pair's chosen and
rejected answers under the policy, and takes one optimizer step per ``ppo_mini_batch_size``
pairs on the preference loss (``actor_rollout_ref.actor.omni_loss``). The reference log-probs
of a pair come from the adapter-disabled base (LoRA) or a frozen copy of the initial weights
(full fine-tuning), computed the first time the pair is used and cached. No rollout, no reward.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from omni_training.actor import Actor
from omni_training.batching import MicroBatch, collate
from omni_training.preference import (
    PREFERENCE_LOSSES,
    REFERENCE_FREE,
    ReferenceCache,
    preference_metrics,
    sequence_log_probs,
    validation_metrics,
)

from omni_trainer.prompts import Prepared, PromptSource
from omni_trainer.preference_pairs import (
    TRUNCATED_KEY,
    Pair,
    by_modality,
    load_pairs,
    preference_settings,
    step_pair_indices,
    validation_indices,
)
from omni_trainer.engines.local.task import LoadedRun, Task
from omni_trainer.engines.local.val_generations import ValGenerationsLog


class OfflinePreference(Task):
    """DPO-family training on preference pairs (see the module docstring)."""

    keeps_reference = True  # full fine-tuning: a frozen copy of the initial weights is the reference

    def __init__(self, run: LoadedRun) -> None:
        super().__init__(run)
        self.settings = preference_settings(run.config)
        self.loss_fn = PREFERENCE_LOSSES.get(self.settings.loss_type)
        self.reference = ReferenceCache(self.settings.loss_type in REFERENCE_FREE)

    def rows(self) -> tuple[PromptSource, list[Prepared]]:
        self.train, self.val = load_pairs(self.config, self.run.processor, self.run.tokenizer)
        self.val_indices = validation_indices(self.config, self.val) if self.val is not None else []
        return self.train, []  # type: ignore[return-value]

    def build(self, actor: Actor, device: str) -> None:
        self.actor = actor
        actor.mask_logits(self.run.logit_mask(self.run.mode))

    def batch_indices(self, step: int, size: int, steps_per_epoch: int, rows: int) -> list[int]:
        return step_pair_indices(self.config, self.train.modalities, step, steps_per_epoch)

    def step(self, step: int, prompts: list[Any], stop_requested: Callable[[], bool]) -> dict[str, float]:
        """One optimizer step per ``ppo_mini_batch_size`` pairs (verl-omni's actor update);
        the metrics are the whole batch's, ``actor/*`` the mean over its optimizer steps (as
        verl reduces them)."""
        pairs: list[Pair] = prompts
        started = time.perf_counter()
        per_update = self.config.actor_rollout_ref.actor.ppo_mini_batch_size
        scored: list[tuple[torch.Tensor, ...]] = []
        updates: list[dict[str, float]] = []
        for start in range(0, len(pairs), per_update):
            group = pairs[start : start + per_update]
            micro = self._micro_batches(group)
            refs = self._reference(group, micro)
            updates.append(self.actor.update_objective(micro, self._objective(len(group), refs, scored)))
        self.actor.end_step()  # the learning-rate schedule counts training steps, as verl's
        actor_metrics = {key: sum(u[key] for u in updates) / len(updates) for key in updates[0]}
        chosen, rejected = (torch.cat([part[k] for part in scored]) for k in (0, 1))
        ref_chosen, ref_rejected = self._reference(pairs, [])
        batch_metrics = self._metrics(chosen, rejected, ref_chosen, ref_rejected)
        return {
            "step": float(step),
            **batch_metrics,
            **{f"{pairs[0].modality}/{key}": value for key, value in batch_metrics.items()},
            **actor_metrics,
            TRUNCATED_KEY: float(self.train.truncated),
            "timing_s/step": time.perf_counter() - started,
        }

    def _objective(
        self, pairs: int, refs: tuple[torch.Tensor, torch.Tensor] | tuple[None, None], scored: list[tuple[torch.Tensor, ...]],
    ) -> Callable[[MicroBatch, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]:
        """The mean preference loss over ``pairs``, a micro-batch's share at a time; each
        micro-batch's sequence log-probs are appended to ``scored`` (detached)."""
        offset = 0

        def objective(batch: MicroBatch, log_probs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            nonlocal offset
            sequence = sequence_log_probs(log_probs, batch.response_mask.to(log_probs.dtype),
                                          average=self.settings.average_log_prob)
            chosen, rejected = sequence[0::2], sequence[1::2]
            rows = slice(offset, offset + len(chosen))
            offset += len(chosen)
            ref_c, ref_r = (None, None) if refs[0] is None else (refs[0][rows].to(chosen), refs[1][rows].to(chosen))
            out = self.loss_fn(chosen, rejected, ref_c, ref_r, self.settings)
            scored.append((chosen.detach().float().cpu(), rejected.detach().float().cpu()))
            return out.losses.sum() / pairs, {"dpo_loss": float(out.losses.detach().sum()) / pairs}

        return objective

    def _metrics(
        self, chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor | None,
        ref_rejected: torch.Tensor | None,
    ) -> dict[str, float]:
        return preference_metrics(self.loss_fn(chosen, rejected, ref_chosen, ref_rejected, self.settings), chosen, rejected)

    def _micro_batches(self, pairs: Sequence[Pair]) -> list[MicroBatch]:
        """Each pair's chosen then rejected answer on adjacent rows, ``ppo_micro_batch_size_per_gpu``
        whole pairs per micro-batch (verl-omni counts the micro-batch in pairs)."""
        size = max(1, self.config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu)
        batches = []
        for start in range(0, len(pairs), size):
            chunk = pairs[start : start + size]
            prompts = [p.prompt.inputs for p in chunk for _ in (0, 1)]
            answers = [ids for p in chunk for ids in (p.chosen, p.rejected)]
            inputs, responses, mask = collate(prompts, answers, [[1] * len(a) for a in answers],
                                              pad_token_id=self.run.pad_token_id)
            batches.append(MicroBatch(inputs, responses, mask))
        return batches

    def _reference(
        self, pairs: Sequence[Pair], micro: Sequence[MicroBatch]
    ) -> tuple[torch.Tensor, torch.Tensor] | tuple[None, None]:
        """The pairs' reference sequence log-probs, from the cache or computed once; ``micro``
        (the pairs' own micro-batches) is reused when every pair is new."""
        def score(wanted: list[Pair]) -> torch.Tensor:
            batches = list(micro) if micro and len(wanted) == len(pairs) else self._micro_batches(wanted)
            return self._sequences(batches, reference=True)

        return self.reference.lookup(pairs, score)

    def _sequences(self, batches: Sequence[MicroBatch], *, reference: bool = False) -> torch.Tensor:
        """Sequence log-probs of every row of ``batches`` (no gradient)."""
        log_probs = self.actor.compute_log_probs(batches, reference=reference)
        return torch.cat([
            sequence_log_probs(lp, b.response_mask.to(lp.dtype), average=self.settings.average_log_prob)
            for lp, b in zip(log_probs, batches, strict=True)
        ])

    @torch.no_grad()
    def validate(self, step: int, generations: ValGenerationsLog | None) -> dict[str, float]:
        """verl-omni's ``val/*`` preference metrics over the validation pairs, overall and per
        modality (``val/<modality>/*``)."""
        if self.val is None or not self.val_indices:
            return {}
        results: dict[str, tuple[Any, ...]] = {}
        for modality, group in by_modality([self.val[i] for i in self.val_indices]).items():
            micro = self._micro_batches(group)
            ref_chosen, ref_rejected = self._reference(group, micro)
            sequences = self._sequences(micro)
            results[modality] = (sequences[0::2], sequences[1::2], ref_chosen, ref_rejected)
        return validation_metrics(self.loss_fn, self.settings, results)

    validates = True
