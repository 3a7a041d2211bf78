"""Offline preference optimisation (``algorithm.sample_source=offline``): DPO and its family on
preference pairs, verl-omni's Omni-Preference form.

A step takes ``data.train_batch_size`` pairs of one modality (verl-omni's modality-grouped
sampler), scores each pair's chosen and rejected answers under the policy, and takes one
optimizer step on the preference loss (``actor_rollout_ref.actor.omni_loss``). The reference
log-probs of a pair come from the adapter-disabled base (LoRA) or a frozen copy of the initial
weights (full fine-tuning); they are computed the first time the pair is used and cached,
never again. No rollout, no reward.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from omni_training.actor import Actor
from omni_training.batching import MicroBatch, collate
from omni_training.preference import (
    PREFERENCE_LOSSES,
    REFERENCE_FREE,
    PreferenceLossFn,
    PreferenceSettings,
    preference_metrics,
    sequence_log_probs,
)

from omni_trainer.config import Config
from omni_trainer.prompts import Prepared, PromptSource
from omni_trainer.tasks import LoadedRun, Task
from omni_trainer.val_generations import ValGenerationsLog

TRUNCATED_KEY = "data/truncated_answers"
"""Training answers cut to ``data.max_response_length`` so far (see :class:`PairSource`)."""


@dataclass
class Pair:
    """A prompt with its chosen and rejected answers as token ids (the answers' own tokens,
    as verl-omni labels them: no end of turn)."""

    prompt: Prepared
    chosen: list[int]
    rejected: list[int]
    modality: str
    key: int  # the pair's row: the cache key of its reference log-probs


def preference_settings(config: Config) -> PreferenceSettings:
    loss = config.actor_rollout_ref.actor.omni_loss
    return PreferenceSettings(
        loss_type=loss.loss_type, beta=loss.beta, label_smoothing=loss.label_smoothing,
        average_log_prob=loss.average_log_prob, simpo_gamma=loss.simpo_gamma,
    )


class PairSource:
    """A preference dataset's pairs, encoded on first use; ``modalities`` without encoding.

    An answer longer than ``data.max_response_length`` tokens is cut to it, keeping its start
    as TRL's ``max_completion_length`` does (its end with ``data.truncation=left``), and
    counted in :attr:`truncated`. With ``data.truncation=error`` such a pair is refused by row.
    """

    def __init__(self, dataset: Any, tokenizer: Any, offset: int = 0, *, config: Config) -> None:
        self.dataset = dataset
        self.tokenizer = tokenizer
        self.offset = offset  # keeps validation pairs' cache keys apart from training pairs'
        self.max_answer_tokens = config.data.max_response_length
        self.truncation = config.data.truncation
        self.cache: dict[int, Pair] = {}
        self.truncated = 0
        self.dropped = int(sum(dataset.report.dropped.values()))

    @property
    def modalities(self) -> list[str]:
        return list(self.dataset.modalities)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: int) -> Pair:
        if item not in self.cache:
            row = self.dataset[item]
            inputs = {"input_ids": row["input_ids"].unsqueeze(0), "attention_mask": row["attention_mask"].unsqueeze(0),
                      **row["multi_modal_inputs"]}
            prompt = Prepared(inputs, row["data_source"], "", int(row["index"]), row["extra_info"])
            chosen, rejected = (self._answer(row[side], side, row) for side in ("chosen", "rejected"))
            self.cache[item] = Pair(prompt, chosen, rejected, row["modality"], self.offset + item)
        return self.cache[item]

    def _answer(self, text: str, side: str, row: dict[str, Any]) -> list[int]:
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        limit = self.max_answer_tokens
        if len(ids) <= limit:
            return ids
        where = f"preference row {row['index']} ({row['modality']}): its {side} answer has {len(ids)} tokens"
        if self.truncation == "error":
            raise ValueError(
                f"{where}, more than data.max_response_length={limit}. Raise data.max_response_length, or unset "
                "data.truncation to cut long answers to it (keeping their start)"
            )
        if self.truncated == 0:
            kept = "end" if self.truncation == "left" else "start"
            print(f"{where}; answers longer than data.max_response_length={limit} are cut to it, keeping their "
                  f"{kept} (set data.truncation=error to refuse them instead); counted in data/truncated_answers",
                  flush=True)
        self.truncated += 1
        return ids[-limit:] if self.truncation == "left" else ids[:limit]


def step_pair_indices(config: Config, modalities: Sequence[str], step: int, steps_per_epoch: int) -> list[int]:
    """``data.train_batch_size`` pairs of one modality for ``step``: verl-omni's modality-grouped
    sampler, seeded by ``data.seed`` and the epoch, so a resumed run sees the same pairs."""
    from omni_data import modality_batches

    sampler = config.data.train_sampler.sampler_kwargs
    epoch, position = divmod(step - 1, steps_per_epoch)
    batches = modality_batches(
        list(modalities), config.data.train_batch_size, seed=int(sampler.get("seed", config.data.seed)), epoch=epoch,
        num_batches=steps_per_epoch, weights=sampler.get("modality_sample_weights"),
        replacement=bool(sampler.get("replacement", True)), drop_last=bool(sampler.get("drop_last", True)),
    )
    return batches[position]


def validation_indices(config: Config, val: PairSource) -> list[int]:
    """The validation pairs scored: all, or ``data.val_max_samples`` of them (balanced across
    modalities with ``data.balance_max_samples_by_modality``)."""
    from omni_data import balanced_indices

    limit = config.data.val_max_samples
    indices = list(range(len(val)))
    if limit is not None and 0 < limit < len(indices):
        indices = (balanced_indices(val.modalities, limit, seed=config.data.seed)
                   if config.data.balance_max_samples_by_modality else indices[:limit])
    return indices


def validation_metrics(
    loss_fn: PreferenceLossFn, settings: PreferenceSettings, parts: dict[str, tuple[Any, ...]]
) -> dict[str, float]:
    """verl-omni's ``val/*`` (overall) and ``val/<modality>/*`` from each modality's (policy
    chosen, policy rejected, reference chosen, reference rejected) sequence log-probs."""
    def joined(k: int) -> torch.Tensor | None:
        values = [p[k] for p in parts.values()]
        return None if values[0] is None else torch.cat(values)

    metrics: dict[str, float] = {}
    for name, (chosen, rejected, ref_c, ref_r) in [("", tuple(joined(k) for k in range(4))),
                                                   *((f"{m}/", p) for m, p in parts.items())]:
        out = loss_fn(chosen, rejected, ref_c, ref_r, settings)
        margins = out.chosen_rewards - out.rejected_rewards
        metrics.update({
            f"val/{name}num_samples": float(len(chosen)),
            f"val/{name}dpo_loss": float(out.losses.mean()),
            f"val/{name}reward_accuracy": float((out.chosen_rewards > out.rejected_rewards).float().mean()),
            f"val/{name}reward_margin": float(margins.mean()),
            f"val/{name}chosen_rewards": float(out.chosen_rewards.mean()),
            f"val/{name}rejected_rewards": float(out.rejected_rewards.mean()),
        })
    return metrics


def load_pairs(config: Config, processor: Any, tokenizer: Any) -> tuple[PairSource, PairSource | None]:
    """The run's training and validation pairs (the built-in task's when no files are given);
    validation pairs' cache keys follow the training pairs'."""
    from omni_data import DatasetConfig, PreferenceDataset

    data = DatasetConfig(max_prompt_length=config.data.max_prompt_length, on_bad_row=config.data.on_bad_row)  # type: ignore[arg-type]
    if config.data.train_files is None:
        from omni_trainer.builtin_preference import builtin_preference_files

        train_files, val_files = builtin_preference_files(config)
    else:
        train_files, val_files = config.data.train_files, config.data.val_files or []
    train = PairSource(PreferenceDataset(train_files, processor, data), tokenizer, config=config)
    print(train.dataset.report.format())  # each reason counted, as for RL prompts (overlong_prompt=...)
    val = None
    if val_files:
        val = PairSource(PreferenceDataset(val_files, processor, data), tokenizer, offset=len(train), config=config)
        print(val.dataset.report.format())
    return train, val


class ReferenceCache(dict[int, tuple[float, float]]):
    """Each pair's reference sequence log-probs (chosen, rejected) by pair key: computed the
    first time the pair is seen, never again."""

    def __init__(self, reference_free: bool) -> None:
        super().__init__()
        self.reference_free = reference_free

    def lookup(
        self, pairs: Sequence[Pair], score: Callable[[list[Pair]], torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor] | tuple[None, None]:
        """The pairs' (chosen, rejected) reference log-probs; ``score`` gives the sequence
        log-probs of the pairs not cached yet, each pair's chosen then rejected row (``None``
        for a reference-free loss)."""
        if self.reference_free:
            return None, None
        wanted = list({p.key: p for p in pairs if p.key not in self}.values())  # a batch may repeat a pair
        if wanted:
            scores = score(wanted)
            for pair, c, r in zip(wanted, scores[0::2].tolist(), scores[1::2].tolist(), strict=True):
                self[pair.key] = (c, r)
        values = torch.tensor([self[p.key] for p in pairs], dtype=torch.float32)
        return values[:, 0], values[:, 1]


def by_modality(pairs: Sequence[Pair]) -> dict[str, list[Pair]]:
    """``pairs`` grouped by modality, in modality order (validation scores a modality at a time)."""
    groups: dict[str, list[Pair]] = {}
    for pair in pairs:
        groups.setdefault(pair.modality, []).append(pair)
    return dict(sorted(groups.items()))


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
