"""Experiment loggers (``trainer.logger``): the console line is always printed; these add
TensorBoard event files and Weights & Biases runs."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

LOGGERS = ("console", "tensorboard", "wandb")


class MetricsSink(Protocol):
    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...
    def close(self) -> None: ...


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

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    def __init__(self, run_dir: Path, project: str, name: str, config: Mapping[str, Any]) -> None:
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=project, name=name, config=dict(config), dir=str(run_dir))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log({k: v for k, v in metrics.items() if k != "step"}, step=step)

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
