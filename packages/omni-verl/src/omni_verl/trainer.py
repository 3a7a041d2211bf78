"""Our synchronous trainer for verl's V1 loop, registered with verl's ``register_trainer`` as
``omni_sync`` (``trainer.v1.trainer_mode``); verl's ``sync`` trainer with two additions:

- Ctrl-C finishes the step, saves and ends the run, as on the local engine. The trainer runs
  in a Ray actor; the ``trainer`` process (which gets the Ctrl-C, Ray's processes ignore it)
  writes a stop request in the run directory (:mod:`omni_verl.stop`), and
  the trainer reads it at the end of each step (``on_step_end``: after verl's own save, and
  after the rollout has the step's weights) and before the first (``on_train_begin``). It
  saves through verl's ``_save_checkpoint`` (``test_update_guard`` patches it by name, so it
  fails if verl renames it).
- A run whose policy updates are skipped step after step stops
  (:class:`omni_training.run_guards.SkippedUpdateWatch`), as one whose scorer fails does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from omni_verl.settings import TRAINER_MODE
from omni_verl.stop import stop_file
from omni_training.run_guards import SkippedUpdateWatch


@register_trainer(TRAINER_MODE)
class OmniSyncTrainer(PPOTrainerSync):
    """verl's synchronous trainer, stopping at a step's end on request and on skipped updates."""

    def _run_dir(self) -> Path:
        return Path(os.path.abspath(self.config.trainer.default_local_dir))

    def step(self, metrics: dict[str, Any], timing_raw: dict[str, Any]) -> Any:
        batch = super().step(metrics, timing_raw)
        if not hasattr(self, "skipped_updates"):
            self.skipped_updates = SkippedUpdateWatch()
        self.skipped_updates.observe(self.global_steps, metrics, run_dir=str(self._run_dir()))
        return batch

    def on_train_begin(self) -> None:
        super().on_train_begin()
        if stop_file(self._run_dir()).exists():  # Ctrl-C during start-up: no step is run
            self.total_training_steps = self.global_steps - 1

    def on_step_end(self) -> None:
        super().on_step_end()
        if not stop_file(self._run_dir()).exists():
            return
        save_freq = self.config.trainer.save_freq
        if not (save_freq > 0 and self.global_steps % save_freq == 0):  # verl saved none this step
            self._save_checkpoint()
        self.total_training_steps = self.global_steps  # verl's loop ends after logging this step
