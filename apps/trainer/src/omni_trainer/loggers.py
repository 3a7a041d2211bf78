"""Experiment loggers (``trainer.logger``): the console line is always printed; these add
TensorBoard event files and Weights & Biases runs.

Besides the metrics, a sink takes the validation samples of ``trainer.log_val_generations``
(:mod:`omni_trainer.engines.local.val_generations`) in the layout verl's ``ValidationGenerationsLogger``
gives them, so dashboards built on a verl run read a local one: ``val/generations``, a
Markdown text per validation in TensorBoard, a table with one row per validation in W&B.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

LOGGERS = ("console", "tensorboard", "wandb")
GENERATIONS_KEY = "val/generations"
"""verl's key for the logged validation samples."""

Generation = tuple[str, str, float]
"""A validation sample as verl's logger takes it: prompt, response, score."""


class MetricsSink(Protocol):
    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...
    def log_generations(self, step: int, samples: Sequence[Generation]) -> None: ...
    def close(self) -> None: ...


def generations_markdown(step: int, samples: Sequence[Generation]) -> str:
    """The samples as verl writes them to TensorBoard: a heading, then each sample's prompt,
    response and score."""
    parts = [f"**Generation Results - Step {step}**\n\n"]
    for number, (prompt, response, score) in enumerate(samples, 1):
        parts.append(f"### Sample {number}\n**Input:** {prompt}\n\n**Output:** {response}\n\n**Score:** {score}\n\n---\n\n")
    return "".join(parts)


def generations_columns(count: int) -> list[str]:
    """verl's W&B table columns: ``step``, then ``input_i``, ``output_i``, ``score_i`` per sample."""
    return ["step", *(f"{name}_{i}" for i in range(1, count + 1) for name in ("input", "output", "score"))]


class TensorBoardSink:
    """Scalars into ``<run_dir>/tensorboard``."""

    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():
            if isinstance(value, int | float) and math.isfinite(value) and key != "step":
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_generations(self, step: int, samples: Sequence[Generation]) -> None:
        self.writer.add_text(GENERATIONS_KEY, generations_markdown(step, samples), step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    def __init__(self, run_dir: Path, project: str, name: str, config: Mapping[str, Any]) -> None:
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=project, name=name, config=dict(config), dir=str(run_dir))
        self.generation_rows: list[list[Any]] = []

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log({k: v for k, v in metrics.items() if k != "step"}, step=step)

    def log_generations(self, step: int, samples: Sequence[Generation]) -> None:
        """One row per validation, all rows logged anew each time (a W&B table logged under one
        key is replaced, not extended; verl does the same)."""
        self.generation_rows.append([step, *(value for sample in samples for value in sample)])
        columns: list[str | int] = [*generations_columns(len(samples))]
        table = self.wandb.Table(columns=columns, data=self.generation_rows)
        self.run.log({GENERATIONS_KEY: table}, step=step)

    def close(self) -> None:
        self.run.finish()


def wandb_configured() -> bool:
    return bool(os.environ.get("WANDB_API_KEY")) or os.environ.get("WANDB_MODE") in ("offline", "disabled")


def build_sinks(
    names: Sequence[str], run_dir: Path, *, project: str, experiment: str, config: Mapping[str, Any]
) -> list[MetricsSink]:
    """The sinks named in ``trainer.logger`` (besides the console).

    Raises:
        ValueError: an unknown logger name, or a logger whose package is not installed.
    """
    unknown = [name for name in names if name not in LOGGERS]
    if unknown:
        raise ValueError(f"Unknown trainer.logger {unknown}; valid: {', '.join(LOGGERS)}.")
    sinks: list[MetricsSink] = []
    if "tensorboard" in names:
        try:
            sinks.append(TensorBoardSink(run_dir))
        except ImportError as exc:
            raise ValueError(f"trainer.logger has tensorboard but it is not installed ({exc}); `uv pip install tensorboard`.") from exc
    if "wandb" in names:
        try:
            import wandb  # noqa: F401
        except ImportError as exc:
            raise ValueError("trainer.logger has wandb but it is not installed; `uv pip install wandb`.") from exc
        if wandb_configured():
            sinks.append(WandbSink(run_dir, project, experiment, config))
        else:
            print("wandb logger skipped: not configured (set WANDB_API_KEY, or WANDB_MODE=offline)")
    return sinks
