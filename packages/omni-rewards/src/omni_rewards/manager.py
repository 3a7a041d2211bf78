"""The reward manager: scores a batch in parallel worker processes, never hanging.

Every sample gets a score. One that times out, crashes its scorer, or (when so configured)
has an unknown ``data_source`` gets 0 and is counted in the metrics (``reward/timeouts``,
``reward/errors``, ``reward/skipped``, in total and per data source), and the first
messages are logged: a 0 is never silent.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from omni_rewards.api import GroundTruth, run_scorer
from omni_rewards.equivalence import warm_up
from omni_rewards.errors import UnknownDataSourceError
from omni_rewards.metrics import DATA_PROBLEMS, batch_metrics, report_failures
from omni_rewards.outcomes import BatchResult, SampleOutcome
from omni_rewards.pool import StartMethod, Task, TaskOutcome, TimedWorkerPool
from omni_rewards.registry import SCORERS, ScorerRegistry

logger = logging.getLogger("omni_rewards")

UnknownDataSourcePolicy = Literal["raise", "skip"]
_POLICIES: tuple[UnknownDataSourcePolicy, ...] = ("raise", "skip")
_START_METHODS: tuple[StartMethod, ...] = ("forkserver", "spawn", "fork")


@dataclass(frozen=True)
class RewardManagerConfig:
    """How the reward manager runs. Plain data; :class:`RewardManager` builds from it."""

    num_workers: int | None = None
    """Worker processes. None: one per CPU (``os.cpu_count()``), scoring is CPU-bound."""

    timeout_s: float = 30.0
    """Per-sample limit in seconds. An overrunning sample's worker is killed and the sample
    scores 0 (counted in ``reward/timeouts``). math-verify can run for minutes on
    adversarial LaTeX; this bounds a training step."""

    on_unknown_data_source: UnknownDataSourcePolicy = "raise"
    """``raise``: fail before scoring anything (a misconfigured dataset should stop a run).
    ``skip``: score such samples 0 and count them in ``reward/skipped``."""

    start_method: StartMethod = "forkserver"
    """multiprocessing start method; see :class:`omni_rewards.pool.TimedWorkerPool`."""

    max_logged_errors: int = 5
    """Failures logged (and kept in ``BatchResult.errors``) per batch; the rest are counted."""

    scorer_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Keyword arguments per data source, e.g. ``{"openai/gsm8k": {"method": "flexible"}}``."""

    preload: tuple[str, ...] = ()
    """Modules each worker imports before it is ready, besides omni_rewards and math-verify: an
    import that takes seconds (transformers' tokenizers, for a judge's ``reward_model_tokenizer``)
    is then part of the start-up, not of the first samples' ``timeout_s``."""

    def __post_init__(self) -> None:
        problems = []
        if self.num_workers is not None and self.num_workers < 1:
            problems.append(
                f"num_workers must be >= 1 or None (one per CPU), got {self.num_workers}"
            )
        if not self.timeout_s > 0:
            problems.append(f"timeout_s must be > 0 seconds, got {self.timeout_s}")
        if self.on_unknown_data_source not in _POLICIES:
            problems.append(
                f"on_unknown_data_source must be one of {', '.join(_POLICIES)}, "
                f"got {self.on_unknown_data_source!r}"
            )
        if self.start_method not in _START_METHODS:
            problems.append(
                f"start_method must be one of {', '.join(_START_METHODS)}, "
                f"got {self.start_method!r}"
            )
        if self.max_logged_errors < 0:
            problems.append(f"max_logged_errors must be >= 0, got {self.max_logged_errors}")
        if problems:
            raise ValueError("Invalid RewardManagerConfig: " + "; ".join(problems) + ".")

    def workers(self) -> int:
        """The number of worker processes to run."""
        return self.num_workers if self.num_workers is not None else os.cpu_count() or 1


class RewardManager:
    """Scores batches with the registered scorers in timed worker processes.

    Thread-safe (one batch at a time); usable from any thread. Workers start on the first
    batch (or :meth:`start`) and live until :meth:`close`; use it as a context manager.
    """

    def __init__(
        self, config: RewardManagerConfig | None = None, registry: ScorerRegistry = SCORERS
    ) -> None:
        self.config = config or RewardManagerConfig()
        self.registry = registry
        self._pool = TimedWorkerPool(
            self.config.workers(),
            start_method=self.config.start_method,
            preload=("omni_rewards", "math_verify", *self.config.preload),
            initializer=warm_up,
        )
        self._lock = threading.Lock()

    def launch(self) -> None:
        """Create the worker processes without waiting for their imports (see
        :meth:`omni_rewards.pool.TimedWorkerPool.launch`); :meth:`start` waits."""
        with self._lock:
            self._pool.launch()

    def start(self) -> None:
        """Start the workers now, so the first batch does not pay for their imports."""
        with self._lock:
            self._pool.start()

    def close(self) -> None:
        """Stop the workers."""
        with self._lock:
            self._pool.close()

    def __enter__(self) -> RewardManager:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def score_batch(
        self,
        data_sources: Sequence[str],
        solution_strs: Sequence[str],
        ground_truths: Sequence[GroundTruth],
        extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> BatchResult:
        """Score every sample (verl's batch reward function call shape).

        Raises:
            ValueError: the sequences differ in length.
            UnknownDataSourceError: a data source has no scorer and the policy is ``raise``.
        """
        size = len(data_sources)
        infos: Sequence[Mapping[str, Any] | None] = (
            extra_infos if extra_infos is not None else [None] * size
        )
        lengths = {len(solution_strs), len(ground_truths), len(infos)}
        if lengths != {size}:
            raise ValueError(
                f"score_batch needs one entry per sample: got {size} data_sources, "
                f"{len(solution_strs)} solution_strs, {len(ground_truths)} ground_truths "
                f"and {len(infos)} extra_infos."
            )
        self._check_data_sources(data_sources)
        tasks: list[Task] = []
        positions: list[int] = []
        for i, source in enumerate(data_sources):
            if source in self.registry:
                kwargs = dict(self.config.scorer_kwargs.get(source, {}))
                args = (self.registry.get(source), solution_strs[i], ground_truths[i], infos[i])
                tasks.append((run_scorer, args, kwargs))
                positions.append(i)
        with self._lock:
            ran = self._pool.run(tasks, self.config.timeout_s) if tasks else []
        by_position = dict(zip(positions, ran, strict=True))
        outcomes = [
            self._outcome(source, by_position.get(i)) for i, source in enumerate(data_sources)
        ]
        errors = report_failures(outcomes, self.config.max_logged_errors)
        metrics = batch_metrics(outcomes)
        if metrics[DATA_PROBLEMS]:
            logger.warning(
                "reward: %d samples in this batch have malformed data (a blank label, malformed "
                "options); they were scored, and are counted in %s per data source. Fix the "
                "dataset.",
                metrics[DATA_PROBLEMS],
                DATA_PROBLEMS,
            )
        return BatchResult(outcomes=outcomes, metrics=metrics, errors=errors)

    def _check_data_sources(self, data_sources: Sequence[str]) -> None:
        unknown = sorted({s for s in data_sources if s not in self.registry})
        if unknown and self.config.on_unknown_data_source == "raise":
            raise UnknownDataSourceError(
                f"No reward scorer is registered for data_source {', '.join(map(repr, unknown))}. "
                f"Registered: {', '.join(self.registry.keys()) or 'none'}. Register a scorer "
                "(omni_rewards.SCORERS.add), fix the dataset's data_source column, or set "
                "on_unknown_data_source='skip' to score such samples 0 and count them."
            )

    def _outcome(self, source: str, ran: TaskOutcome | None) -> SampleOutcome:
        if ran is None:
            return SampleOutcome(
                source, "skipped", {"score": 0.0}, f"no scorer is registered for {source!r}"
            )
        if ran.status == "ok":
            return SampleOutcome(source, "ok", ran.value)
        return SampleOutcome(source, ran.status, {"score": 0.0}, ran.error)
