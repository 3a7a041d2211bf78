"""math_equivalent's memoisation: fewer math-verify calls, never a different answer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from omni_rewards import equivalence


@pytest.fixture
def parse_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts math-verify parse calls per parsed string, with cold caches."""
    parse, verify, gold_targets, prediction_targets = equivalence._math_verify()
    calls: Counter[str] = Counter()

    def counting_parse(text: str, *args: Any, **kwargs: Any) -> Any:
        calls[text] += 1
        return parse(text, *args, **kwargs)

    monkeypatch.setattr(
        equivalence,
        "_math_verify",
        lambda: (counting_parse, verify, gold_targets, prediction_targets),
    )
    equivalence.clear_caches()
    yield calls
    equivalence.clear_caches()


GROUP = ["\\boxed{\\frac{1}{2}}", "\\boxed{0.5}", "\\boxed{0.5}", "\\boxed{2}", "\\boxed{0.5}"]


def test_a_group_parses_its_ground_truth_once(parse_calls: Counter[str]) -> None:
    results = [equivalence.math_equivalent(answer, "\\frac{2}{4}") for answer in GROUP]
    assert results == [True, True, True, False, True]
    assert parse_calls["\\boxed{\\frac{2}{4}}"] == 1
    # identical answers are verified once: "\boxed{0.5}" parsed once for three samples
    assert parse_calls["\\boxed{0.5}"] == 1


def test_memoised_results_equal_fresh_ones(parse_calls: Counter[str]) -> None:
    first = [equivalence.math_equivalent(answer, "0.5") for answer in GROUP]
    equivalence.clear_caches()
    fresh = [equivalence.math_equivalent(answer, "0.5") for answer in GROUP]
    again = [equivalence.math_equivalent(answer, "0.5") for answer in GROUP]
    assert first == fresh == again == [True, True, True, False, True]


def test_a_result_that_a_timeout_could_have_cut_short_is_not_kept(
    parse_calls: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a timeout of 0 s, every call "may have timed out": nothing is memoised.
    monkeypatch.setattr(equivalence, "MATH_VERIFY_TIMEOUT_S", 0)
    for _ in range(2):
        assert equivalence.math_equivalent("\\boxed{0.5}", "\\frac{1}{2}")
    assert parse_calls["\\boxed{\\frac{1}{2}}"] == 2
    assert parse_calls["\\boxed{0.5}"] == 2


def test_long_predictions_are_not_memoised(parse_calls: Counter[str]) -> None:
    long_answer = "x" * equivalence.MAX_CACHED_CHARS + " \\boxed{3}"
    for _ in range(2):
        assert equivalence.math_equivalent(long_answer, "3")
    assert parse_calls[long_answer] == 2
    assert parse_calls["\\boxed{3}"] == 1  # the ground truth still is


def test_a_math_verify_exception_counts_as_not_equivalent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken_parse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("sympy fell over")

    _, verify, gold_targets, prediction_targets = equivalence._math_verify()
    monkeypatch.setattr(
        equivalence, "_math_verify", lambda: (broken_parse, verify, gold_targets, prediction_targets)
    )
    equivalence.clear_caches()
    assert equivalence.math_equivalent("\\boxed{3}", "3") is False
    equivalence.clear_caches()
