"""What a verl run shows and leaves in its run directory, as a local-engine run does.

verl's trainer loop runs in its task-runner actor and logs through its own ``Tracking``
(no backend can be added); its ``file`` logger writes each step to this launch's metrics
file (:func:`omni_trainer.engines.verl.launch.metrics_file`). :class:`StepReporter` follows
that file from the driver: for each step it prints the local engine's step line, appends
the step to ``metrics.jsonl`` and redraws ``curve.png``; at the end :meth:`finish` writes
``summary.txt``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from omni_trainer.config import Config
from omni_trainer.engines.verl.checkpoints import STEP_PREFIX, tracked_step
from omni_trainer.reporting import report_step, validation_line, write_summary
from omni_trainer.run_dir import MetricsLog

POLL_S = 0.5
STEP_KEY = "training/global_step"
VALIDATION_PREFIXES = ("val-core/", "val/")
"""RL validation's headline metrics (verl's ``val-core/``); an offline preference run's (``val/``)."""


class StepReporter:
    """Follows verl's metrics file of this launch (started before the run, finished after).

    ``start_step``: the step verl resumes after (default: its newest checkpoint in ``run_dir``).
    """

    def __init__(
        self, run_dir: Path, metrics_path: Path, config: Config, total_steps: int, start_step: int | None = None,
        out: IO[str] | None = None,
    ) -> None:
        self.run_dir, self.metrics_path, self.config, self.total = run_dir, metrics_path, config, total_steps
        self.out = out  # the terminal (None: stdout), where the step lines go
        self.start_step = tracked_step(run_dir) if start_step is None else start_step
        self.log = MetricsLog(run_dir / "metrics.jsonl", resume_after=self.start_step)
        self.validation: dict[str, float] = {}
        self.last_step = self.start_step
        self._offset = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="verl-step-reporter", daemon=True)
        self._started = time.monotonic()

    def start(self) -> StepReporter:
        self._thread.start()
        return self

    def finish(self, *, uses_lora: bool, dropped: int = 0) -> str:
        """Stop following (reading what is left) and write ``summary.txt``; returns it.
        ``dropped``: rows left out of the train files at load (the driver's own count)."""
        self._stop.set()
        self._thread.join()
        self._read()
        checkpoint = self.run_dir / f"{STEP_PREFIX}{tracked_step(self.run_dir)}"
        return write_summary(
            self.run_dir, self.config, step=self.last_step, steps_this_session=self.last_step - self.start_step,
            elapsed=time.monotonic() - self._started, log=self.log, final=self.validation,
            checkpoint=checkpoint if checkpoint.is_dir() else None, uses_lora=uses_lora, dropped=dropped,
            lora_note=" (verl's sharded checkpoint in actor/; its LoRA settings in actor/lora_train_meta.json)",
        )

    def _follow(self) -> None:
        while not self._stop.wait(POLL_S):
            self._read()

    def _read(self) -> None:
        if not self.metrics_path.is_file():
            return
        with self.metrics_path.open("rb") as handle:
            handle.seek(self._offset)
            chunk = handle.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        for line in complete.decode().splitlines():
            if line.strip():
                self._record(json.loads(line))

    def _record(self, record: dict[str, Any]) -> None:
        step, data = int(record["step"]), record["data"]
        numbers = {k: float(v) for k, v in data.items() if isinstance(v, int | float)}
        validation = {k: v for k, v in numbers.items() if k.startswith(VALIDATION_PREFIXES)}
        if validation:
            self.validation = validation
            print(validation_line(step, validation), file=self.out or sys.stdout, flush=True)
        if STEP_KEY in data:
            self.last_step = step
            row = {"step": float(step), **numbers}
            self.log.append(row)
            report_step(self.run_dir, self.log, self.config, step, self.total, row, out=self.out)
