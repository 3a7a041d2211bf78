"""Batch reward metrics: means per data source and failure counts (never a silent 0)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

from omni_rewards.outcomes import SampleOutcome

FAILURE_COUNTERS = {"timeout": "timeouts", "error": "errors", "skipped": "skipped"}
DATA_PROBLEM_KEY = "data_problem"
DATA_PROBLEMS = "reward/data_problems"

logger = logging.getLogger("omni_rewards")


def batch_metrics(outcomes: Sequence[SampleOutcome]) -> dict[str, float]:
    """Metrics of one scored batch.

    - ``reward/score/mean``: over all samples, failures counted as 0.
    - ``reward/<data_source>/<key>/mean``: ``score`` over all that source's samples; other
      keys (``accuracy``, ``format_reward``, ...) over the samples that were scored.
    - ``reward/timeouts``, ``reward/errors``, ``reward/skipped``: counts, also per source as
      ``reward/timeouts/<data_source>`` (present, as 0, for every source in the batch).
    - ``reward/data_problems`` (and ``/<data_source>``): scored samples whose scorer flagged
      their data as malformed (a non-zero ``data_problem`` key, e.g. MMK12's options or a
      blank choice label); they were scored, but the dataset needs fixing.
    """
    metrics: dict[str, float] = {name: 0.0 for name in _counter_names()}
    metrics[DATA_PROBLEMS] = 0.0
    if outcomes:
        metrics["reward/score/mean"] = sum(o.score for o in outcomes) / len(outcomes)
    by_source: dict[str, list[SampleOutcome]] = defaultdict(list)
    for outcome in outcomes:
        by_source[outcome.data_source].append(outcome)
    for source, group in sorted(by_source.items()):
        for counter in _counter_names():
            metrics[f"{counter}/{source}"] = 0.0
        for outcome in group:
            if outcome.status != "ok":
                counter = f"reward/{FAILURE_COUNTERS[outcome.status]}"
                metrics[counter] += 1
                metrics[f"{counter}/{source}"] += 1
        metrics[f"reward/{source}/score/mean"] = sum(o.score for o in group) / len(group)
        scored = [o for o in group if o.status == "ok"]
        problems = sum(1.0 for o in scored if o.result.get(DATA_PROBLEM_KEY, 0.0))
        metrics[DATA_PROBLEMS] += problems
        metrics[f"{DATA_PROBLEMS}/{source}"] = problems
        keys = sorted({key for o in scored for key in o.result} - {"score"})
        for key in keys:
            values = [o.result[key] for o in scored if key in o.result]
            metrics[f"reward/{source}/{key}/mean"] = sum(values) / len(values)
    return metrics


def report_failures(outcomes: Sequence[SampleOutcome], max_logged: int) -> list[str]:
    """Log the first ``max_logged`` failed samples (and how many more); return those messages."""
    failures = [(i, o) for i, o in enumerate(outcomes) if o.status != "ok"]
    messages = [
        f"sample {i} ({o.data_source}) {o.status}, scored 0: {o.error}"
        for i, o in failures[:max_logged]
    ]
    for message in messages:
        logger.warning("reward %s", message)
    if len(failures) > len(messages):
        logger.warning(
            "reward: %d more failed samples in this batch (counted in the metrics, not logged)",
            len(failures) - len(messages),
        )
    return messages


def _counter_names() -> list[str]:
    return [f"reward/{name}" for name in FAILURE_COUNTERS.values()]
