"""The reward manager: parallel, timed, and never silently 0."""

from __future__ import annotations

import logging
import threading

import pytest

from omni_rewards import (
    RewardManager,
    RewardManagerConfig,
    ScorerRegistry,
    UnknownDataSourceError,
    compute_score,
)

# Makes math-verify (sympy) compute a tower of powers: runs for minutes.
PATHOLOGICAL = "\\boxed{9^{9^{9^{9}}}}"

MIXED = [
    ("openai/gsm8k", "#### 72", "72", None),
    ("openai/gsm8k", "#### 71", "72", None),
    ("math", "\\boxed{\\frac{1}{2}}", "0.5", None),
    ("mmk12", "<answer>\\boxed{30^\\circ}</answer>", "30", None),
    ("mmk12", "<answer>45°</answer>", "B", {"options": '{"A": "30°", "B": "45°"}'}),
    ("avqa_r1_6k", "<answer>B</answer>", "<answer>B</answer>", None),
    ("avqa_r1_6k", "<answer>A or B</answer>", "<answer>B</answer>", None),
]


Row = tuple[str, str, str, "dict[str, str] | None"]


def columns(rows: list[Row]) -> list[list]:
    """Rows of (data_source, solution, ground_truth, extra_info) as score_batch's columns."""
    return [list(column) for column in zip(*rows, strict=True)]


def test_scores_equal_compute_score_in_input_order(manager: RewardManager) -> None:
    rows = MIXED * 6
    result = manager.score_batch(*columns(rows))
    expected = [compute_score(*row) for row in rows]
    assert [dict(o.result) for o in result.outcomes] == expected
    assert {o.status for o in result.outcomes} == {"ok"}
    assert result.metrics["reward/timeouts"] == result.metrics["reward/errors"] == 0
    # gsm8k: one of the two samples is right
    assert result.metrics["reward/openai/gsm8k/score/mean"] == 0.5
    # mmk12: one pair with a box (0.3), one pair without (0.15): mean 0.225, as logged
    assert result.metrics["reward/mmk12/format_reward/mean"] == pytest.approx(0.225)
    assert result.metrics["reward/data_problems"] == 0


def test_malformed_data_is_scored_and_counted(
    manager: RewardManager, caplog: pytest.LogCaptureFixture
) -> None:
    bad_options = ("mmk12", "<answer>\\boxed{45}</answer>", "B", {"options": "{A: 30}"})
    blank_label = ("avqa_r1_6k", "<answer></answer>", "<answer> </answer>", None)
    rows = [*MIXED, bad_options, bad_options, blank_label]
    with caplog.at_level(logging.WARNING, logger="omni_rewards"):
        result = manager.score_batch(*columns(rows))
    assert {o.status for o in result.outcomes} == {"ok"}
    # malformed options: no partial credit, format 0.3 -> 0.3 / 1.3; blank label: 0
    assert result.scores[-3:] == [pytest.approx(0.3 / 1.3)] * 2 + [0.0]
    assert result.metrics["reward/data_problems"] == 3
    assert result.metrics["reward/data_problems/mmk12"] == 2
    assert result.metrics["reward/data_problems/avqa_r1_6k"] == 1
    assert result.metrics["reward/data_problems/openai/gsm8k"] == 0
    assert "3 samples in this batch have malformed data" in caplog.text


def test_a_pathological_sample_is_cut_off_and_the_batch_completes(
    manager: RewardManager, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [*MIXED, ("math", PATHOLOGICAL, "1", None), *MIXED]
    with caplog.at_level(logging.WARNING, logger="omni_rewards"):
        result = manager.score_batch(*columns(rows))
    timed_out = result.outcomes[len(MIXED)]
    assert (timed_out.status, timed_out.score) == ("timeout", 0.0)
    assert timed_out.error == "timed out after 2 s"
    others = result.outcomes[: len(MIXED)] + result.outcomes[len(MIXED) + 1 :]
    assert [o.score for o in others] == [compute_score(*row)["score"] for row in MIXED * 2]
    assert result.metrics["reward/timeouts"] == 1
    assert result.metrics["reward/timeouts/math"] == 1
    assert result.metrics["reward/timeouts/mmk12"] == 0
    assert result.errors == [f"sample {len(MIXED)} (math) timeout, scored 0: timed out after 2 s"]
    assert "timed out after 2 s" in caplog.text
    # The killed worker was replaced: the next batch still runs on two workers.
    again = manager.score_batch(*columns(MIXED))
    assert again.scores == [compute_score(*row)["score"] for row in MIXED]


def test_crashing_and_raising_scorers_are_counted_not_silent(manager: RewardManager) -> None:
    rows = [
        ("test/echo", "abc", "", None),
        ("test/raise", "oops", "", None),
        ("test/exit", "", "", None),
        ("test/text", "", "", None),
        ("test/echo", "abcd", "", None),
    ]
    result = manager.score_batch(*columns(rows))
    assert [o.status for o in result.outcomes] == ["ok", "error", "error", "error", "ok"]
    assert result.scores == [0.03, 0.0, 0.0, 0.0, 0.04]
    assert result.outcomes[1].error == "ValueError: cannot parse 'oops'"
    assert result.outcomes[2].error is not None and "exited with code 3" in result.outcomes[2].error
    assert "must return a number or a mapping" in (result.outcomes[3].error or "")
    assert result.metrics["reward/errors"] == 3
    assert result.metrics["reward/errors/test/raise"] == 1
    assert result.metrics["reward/test/echo/length/mean"] == 3.5


def test_only_the_first_errors_are_logged(
    registry: ScorerRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    config = RewardManagerConfig(
        num_workers=1, timeout_s=5, max_logged_errors=2, start_method="fork"
    )
    logs = caplog.at_level(logging.WARNING, logger="omni_rewards")
    with RewardManager(config, registry) as manager, logs:
        result = manager.score_batch(*columns([("test/raise", str(i), "", None) for i in range(5)]))
    assert result.metrics["reward/errors"] == 5
    assert len(result.errors) == 2
    assert "3 more failed samples" in caplog.text


def test_unknown_data_source_fails_fast_by_default(registry: ScorerRegistry) -> None:
    manager = RewardManager(RewardManagerConfig(num_workers=1), registry)
    with pytest.raises(UnknownDataSourceError) as raised:
        manager.score_batch(["openai/gsm8k", "gsm9k"], ["#### 1", "#### 1"], ["1", "1"])
    message = str(raised.value)
    assert "'gsm9k'" in message and "openai/gsm8k" in message and "mmk12" in message
    assert "on_unknown_data_source='skip'" in message
    manager.close()


def test_unknown_data_source_can_be_counted_and_skipped(manager: RewardManager) -> None:
    result = manager.score_batch(["openai/gsm8k", "gsm9k"], ["#### 1", "#### 1"], ["1", "1"])
    assert [(o.status, o.score) for o in result.outcomes] == [("ok", 1.0), ("skipped", 0.0)]
    assert result.metrics["reward/skipped"] == 1
    assert result.metrics["reward/skipped/gsm9k"] == 1


def test_scorer_kwargs_reach_the_scorer(registry: ScorerRegistry) -> None:
    config = RewardManagerConfig(
        num_workers=1, scorer_kwargs={"openai/gsm8k": {"method": "flexible"}}, start_method="fork"
    )
    with RewardManager(config, registry) as manager:
        assert manager.score_batch(["openai/gsm8k"], ["it is 4"], ["4"]).scores == [1.0]


def test_works_from_a_non_main_thread(manager: RewardManager) -> None:
    # math-verify's own timeout cannot work here; the manager's does not need signals.
    found: list[list[float]] = []
    thread = threading.Thread(
        target=lambda: found.append(manager.score_batch(*columns(MIXED)).scores), daemon=True
    )
    thread.start()
    thread.join(timeout=60)
    assert found == [[compute_score(*row)["score"] for row in MIXED]]


def test_mismatched_columns_and_empty_batches(manager: RewardManager) -> None:
    with pytest.raises(ValueError, match="got 2 data_sources, 1 solution_strs, 2 ground_truths"):
        manager.score_batch(["math", "math"], ["1"], ["1", "1"])
    empty = manager.score_batch([], [], [])
    assert empty.outcomes == [] and empty.metrics["reward/errors"] == 0


def test_config_reports_every_problem_at_once() -> None:
    with pytest.raises(ValueError) as raised:
        RewardManagerConfig(
            num_workers=0,
            timeout_s=0,
            on_unknown_data_source="ignore",  # type: ignore[arg-type]
        )
    message = str(raised.value)
    assert "num_workers must be >= 1" in message
    assert "timeout_s must be > 0" in message
    assert "on_unknown_data_source must be one of raise, skip" in message


def test_an_unpicklable_scorer_is_an_error_that_says_why(
    manager: RewardManager, registry: ScorerRegistry
) -> None:
    registry.add("test/lambda", lambda solution_str, ground_truth, extra_info=None: 1.0)
    try:
        result = manager.score_batch(["test/lambda", "test/echo"], ["x", "xy"], ["", ""])
    finally:
        registry.remove("test/lambda")
    assert [o.status for o in result.outcomes] == ["error", "ok"]
    assert "scorers must be module-level functions" in (result.outcomes[0].error or "")
