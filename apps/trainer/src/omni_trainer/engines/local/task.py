"""The local engine's task interface: what the local trainer asks of a task.

A task owns what differs between kinds of training: its prompts, what it needs beside the
actor (a sampling engine, a speech policy, a teacher), one step, what validation measures and
what it writes beside the checkpoints. The local trainer
(:class:`omni_trainer.engines.local.trainer.LocalTrainer`) owns what every task shares: the model and
its adapters, the actor, the run directory, resume, saving and Ctrl-C.

The config names the task (:func:`omni_trainer.tasks.task_name`); :mod:`omni_trainer.engines.local.tasks`
builds it. A new task is a module there with a subclass of :class:`Task`, added to its registry.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_contracts import LogitMask, RolloutAdapter, TrainingAdapter

from omni_trainer.config import Config
from omni_rollout.placeholders import policy_logit_mask
from omni_trainer.prompts import Prepared, PromptSource
from omni_trainer.resolved import ResolvedRun
from omni_trainer.engines.local.step import StepParts, train_step

if TYPE_CHECKING:
    from omni_rollout.local_engine import LocalEngine
    from omni_training.actor import Actor
    from omni_training.distillation import DistillationSettings

    from omni_trainer.engines.local.val_generations import ValGenerationsLog


@dataclass
class LoadedRun:
    """The resolved run (its model built when it is the embedded one) and what the trainer
    loads from its checkpoint before any weights: what every task uses."""

    resolved: ResolvedRun
    model_path: str
    hf_config: Any
    processor: Any
    tokenizer: Any

    @property
    def config(self) -> Config:
        return self.resolved.config

    @property
    def training_adapter(self) -> TrainingAdapter:
        return self.resolved.training_adapter()

    @property
    def rollout_adapter(self) -> RolloutAdapter:
        return self.resolved.rollout_adapter()

    @property
    def mode(self) -> str:
        return self.resolved.mode

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)

    def logit_mask(self, mode: str) -> LogitMask:
        """What ``mode``'s policy stage never samples: the media placeholders, and the output
        head's tail past the tokenizer (both engines' rollouts and the actor mask it)."""
        return policy_logit_mask(self.rollout_adapter, mode, self.hf_config, self.processor, self.tokenizer)

    def text_engine(
        self, actor: Actor, mode: str, *, also_suppressed: tuple[int, ...] = (), model: Any = None
    ) -> LocalEngine:
        """A local engine over ``mode``'s policy stage of ``actor`` (or of ``model``, a copy of
        the actor's, in the actor's precision), ending at the tokenizer's end of turn and never
        sampling what :meth:`logit_mask` masks (nor ``also_suppressed``)."""
        from omni_rollout.local_engine import LocalEngine, find_policy_module
        from omni_training.logit_mask import masked_ids

        module = find_policy_module(actor.model if model is None else model, self.rollout_adapter, mode)
        width = int(module.get_output_embeddings().weight.shape[0])
        return LocalEngine(
            module, eos_token_ids=(self.tokenizer.eos_token_id,), pad_token_id=self.pad_token_id,
            stage_id=self.rollout_adapter.policy_stage_id(mode),
            suppress_token_ids=(*masked_ids(self.logit_mask(mode), width), *also_suppressed),
            autocast_dtype=actor.autocast_dtype,  # the actor's compute dtype (full fine-tune: bf16 on fp32)
        )


class Task:
    """What the local trainer needs of a task, in the order it asks: :meth:`rows` before any
    weights load (they size the run), :meth:`distillation` before the actor loads, :meth:`build`
    once it has; then :meth:`start`, the steps (with :meth:`validate` and :meth:`after_step`
    between them) and :meth:`close`, which always runs. The defaults suit an online task whose
    :meth:`build` sets :attr:`parts` for the RL step."""

    validates = True
    """Whether :meth:`validate` measures anything (``trainer.val_before_train`` runs it)."""
    engine: LocalEngine | None = None
    """The text engine the task samples with, once built (``None``: it samples otherwise)."""
    keeps_reference: bool | None = None
    """Whether a full fine-tune keeps a frozen copy of the initial weights for reference
    log-probs (``None``: when a KL loss needs them)."""
    parts: StepParts

    def __init__(self, run: LoadedRun) -> None:
        self.run = run
        self.config = run.config

    def rows(self) -> tuple[PromptSource, list[Prepared]]:
        """The training prompts and the validation prompts."""
        raise NotImplementedError

    def distillation(self) -> DistillationSettings | None:
        """The actor's distillation loss settings (checked before any weights load)."""
        return None

    def build(self, actor: Actor, device: str) -> None:
        """What the task needs beside the actor; may mask the actor's logits or add regularizers."""
        raise NotImplementedError

    def batch_indices(self, step: int, size: int, steps_per_epoch: int, rows: int) -> list[int]:
        """The training rows of ``step``: epoch by epoch, shuffled by ``data.seed`` and the epoch
        (``data.shuffle``); a function of the step alone, so a resumed run sees the same."""
        epoch, position = divmod(step - 1, steps_per_epoch)
        order = list(range(rows))
        if self.config.data.shuffle:
            random.Random(self.config.data.seed + epoch).shuffle(order)
        return order[position * size : (position + 1) * size]

    def start(self) -> None:
        """Start what the steps use (reward processes): Ctrl-C here stops the run."""

    def prefetch(self, schedule: Callable[[int], list[Prepared]], first_step: int, last_step: int) -> None:
        """Before the first step: ``schedule(step)`` gives any step's prompts, for a task that
        samples ahead (``async_training.max_staleness``); called on the trainer's thread."""

    def step(self, step: int, prompts: list[Prepared], stop_requested: Callable[[], bool]) -> dict[str, float]:
        """One training step; returns its metrics. Raises
        :class:`omni_trainer.engines.local.step.StepDiscarded` when stopped before its update."""
        return train_step(self.parts, step, prompts, stop_requested)

    def validate(self, step: int, generations: ValGenerationsLog | None) -> dict[str, float]:
        return {}

    def after_step(self, run_dir: Path, step: int, *, first: bool, last: bool) -> None:
        """What the task writes beside the metrics after ``step`` (samples to listen to)."""

    def close(self) -> None:
        """Stop what :meth:`start` and :meth:`build` started."""


TaskFactory = Callable[[LoadedRun], Task]
