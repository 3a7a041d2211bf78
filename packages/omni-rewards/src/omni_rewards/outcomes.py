"""What the reward manager returns: one outcome per sample, and the batch's metrics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

SampleStatus = Literal["ok", "timeout", "error", "skipped"]


@dataclass(frozen=True)
class SampleOutcome:
    """One sample's reward: the scorer's result, or 0 and why."""

    data_source: str
    status: SampleStatus
    result: Mapping[str, float]
    error: str | None = None

    @property
    def score(self) -> float:
        return self.result["score"]


@dataclass(frozen=True)
class BatchResult:
    """The rewards of a batch, in input order, with their metrics."""

    outcomes: list[SampleOutcome]
    metrics: dict[str, float]
    errors: list[str]
    """The first ``max_logged_errors`` failure messages (also logged)."""

    @property
    def scores(self) -> list[float]:
        return [outcome.score for outcome in self.outcomes]
