"""Offline preference data (``algorithm.sample_source=offline``), shared by both engines: a
dataset's pairs encoded for the actor, verl-omni's modality-grouped step sampler, the
validation subset and metrics, and the cache of reference log-probs (computed the first time
a pair is used, never again). The step itself is each engine's: the local engine's
(:mod:`omni_trainer.engines.local.tasks.preference`) and verl's actor workers
(:mod:`omni_trainer.engines.verl.preference`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from omni_training.preference import PreferenceSettings

from omni_trainer.builtin_files import builtin_preference_files
from omni_trainer.config import Config
from omni_trainer.prompts import Prepared, PromptSource

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


def load_pairs(config: Config, processor: Any, tokenizer: Any) -> tuple[PairSource, PairSource | None]:
    """The run's training and validation pairs (the built-in task's when no files are given);
    validation pairs' cache keys follow the training pairs'."""
    from omni_data import DatasetConfig, PreferenceDataset

    data = DatasetConfig(max_prompt_length=config.data.max_prompt_length, on_bad_row=config.data.on_bad_row)  # type: ignore[arg-type]
    if config.data.train_files is None:
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


def by_modality(pairs: Sequence[Pair]) -> dict[str, list[Pair]]:
    """``pairs`` grouped by modality, in modality order (validation scores a modality at a time)."""
    groups: dict[str, list[Pair]] = {}
    for pair in pairs:
        groups.setdefault(pair.modality, []).append(pair)
    return dict(sorted(groups.items()))


