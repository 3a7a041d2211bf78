"""``trainer.log_val_generations=N``: N validation samples (prompt, response, score) per validation.

The choice is verl's (``RayPPOTrainer._maybe_log_val_generations``): every validation sample,
sorted by prompt text, shuffled with the fixed seed 42, the first N. While the validation rows
stay the same, every validation picks the same prompts, so a reader follows each one's answer
over the run.

Where they go (:class:`ValGenerationsLog`):

- ``<run_dir>/val_generations/step_<step>.jsonl``, one file per validation (step 0: before
  training), one JSON object per sample with the fields of verl's generation dumps
  (``input``, ``output``, ``gts``, ``score``, ``step``) plus ``data_source`` and the scorer's
  ``status`` (``ok``, ``timeout``, ``error``, ``skipped``: a failed sample scores 0). One file
  per step keeps each validation readable and diffable on its own (``diff step_0.jsonl
  step_60.jsonl``) and is rewritten, not appended to, when a resumed run validates that step again;
- the TensorBoard and W&B loggers of ``trainer.logger``, as verl's ``ValidationGenerationsLogger``
  logs them (``val/generations``: a text panel, a table with one row per validation).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from omni_trainer.loggers import MetricsSink

VERL_SEED = 42
"""verl's fixed shuffle seed for the logged validation samples."""
STEP_FILE = re.compile(r"step_(\d+)\.jsonl")


@dataclass(frozen=True)
class ValGeneration:
    """One validation sample: the prompt and response as text (special tokens skipped, as verl
    decodes them), its score and what it was scored against."""

    input: str
    output: str
    score: float
    gts: str
    data_source: str
    status: str


def choose(samples: Sequence[ValGeneration], count: int) -> list[ValGeneration]:
    """verl's choice of ``count`` samples: sorted by prompt text (stable: a prompt's responses
    keep their order), shuffled with :data:`VERL_SEED`, the first ``count``."""
    ordered = sorted(samples, key=lambda sample: sample.input)
    np.random.RandomState(VERL_SEED).shuffle(ordered)  # type: ignore[arg-type]  # a list, in place, as verl's
    return ordered[:count]


class ValGenerationsLog:
    """Writes each validation's chosen samples to ``directory`` and to the sinks.

    Args:
        directory: ``<run_dir>/val_generations``.
        count: ``trainer.log_val_generations`` (> 0).
        sinks: the run's TensorBoard / W&B loggers.
        resume_after: the step a resumed run continues after: files of later steps (from the
            interrupted session) are removed, as ``metrics.jsonl`` drops their lines; ``None``
            (a run starting over): every earlier file is removed.
    """

    def __init__(
        self, directory: Path, count: int, sinks: Sequence[MetricsSink], *, resume_after: int | None
    ) -> None:
        if count <= 0:
            raise ValueError(f"trainer.log_val_generations must be > 0 to log samples, got {count}")
        self.directory, self.count, self.sinks = directory, count, sinks
        for path in directory.glob("step_*.jsonl"):
            match = STEP_FILE.fullmatch(path.name)
            if match and (resume_after is None or int(match.group(1)) > resume_after):
                path.unlink()

    def log(self, step: int, samples: Sequence[ValGeneration]) -> Path:
        """Choose, write ``step_<step>.jsonl`` and hand the samples to the sinks; returns the file."""
        chosen = choose(samples, self.count)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"step_{step}.jsonl"
        lines = [json.dumps({**asdict(sample), "step": step}, ensure_ascii=False) for sample in chosen]
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        table = [(sample.input, sample.output, sample.score) for sample in chosen]
        for sink in self.sinks:
            sink.log_generations(step, table)
        return path
