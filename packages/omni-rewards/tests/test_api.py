from __future__ import annotations

import math
import subprocess
import sys

import pytest

from omni_rewards import (
    SCORERS,
    ScorerOutputError,
    ScorerRegistrationError,
    ScorerRegistry,
    UnknownDataSourceError,
    compute_score,
    normalise_output,
)


def constant_scorer(solution_str: str, ground_truth: str, extra_info: object = None) -> float:
    return 0.25


def other_scorer(solution_str: str, ground_truth: str, extra_info: object = None) -> float:
    return 0.75


def test_builtin_data_sources_are_registered() -> None:
    for source in ("openai/gsm8k", "math", "mmk12", "avqa_r1_6k"):
        assert source in SCORERS


def test_compute_score_has_verls_call_shape_and_returns_named_metrics() -> None:
    result = compute_score(
        data_source="openai/gsm8k",
        solution_str="#### 4",
        ground_truth="4",
        extra_info={"split": "train"},
    )
    assert result == {"score": 1.0, "accuracy": 1.0}


def test_compute_score_forwards_keyword_arguments_to_the_scorer() -> None:
    # strict needs "#### "; flexible takes the last number.
    assert compute_score("openai/gsm8k", "it is 4", "4")["score"] == 0.0
    assert compute_score("openai/gsm8k", "it is 4", "4", method="flexible")["score"] == 1.0


def test_unknown_data_source_names_the_registered_ones() -> None:
    with pytest.raises(UnknownDataSourceError) as raised:
        compute_score("openai/gsm9k", "#### 4", "4")
    message = str(raised.value)
    assert "'openai/gsm9k'" in message
    assert "openai/gsm8k" in message and "mmk12" in message and "avqa_r1_6k" in message
    assert "SCORERS.add" in message


def test_a_user_scorer_can_be_registered_and_removed() -> None:
    SCORERS.add("test/constant", constant_scorer)
    try:
        assert compute_score("test/constant", "", "") == {"score": 0.25}
    finally:
        SCORERS.remove("test/constant")
    assert "test/constant" not in SCORERS


def test_registry_refuses_duplicates_non_callables_and_empty_keys() -> None:
    registry = ScorerRegistry()
    registry.register("a", "b")(constant_scorer)
    registry.add("a", constant_scorer)  # the same scorer again is harmless
    duplicate = r"Duplicate scorer for data_source 'a'.*constant_scorer"
    with pytest.raises(ScorerRegistrationError, match=duplicate):
        registry.add("a", other_scorer)
    with pytest.raises(ScorerRegistrationError, match="must be callable"):
        registry.add("c", 3)  # type: ignore[arg-type]
    with pytest.raises(ScorerRegistrationError, match="non-empty strings"):
        registry.add("", other_scorer)
    assert registry.keys() == ["a", "b"]
    with pytest.raises(UnknownDataSourceError, match="Registered: a, b"):
        registry.remove("c")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("0.5", "must return a number or a mapping"),
        ({"accuracy": 1.0}, 'with a "score" key'),
        ({"score": 1.0, "note": "good"}, "non-numeric 'note'"),
        ({"score": math.nan}, "must be finite"),
        (math.inf, "must be finite"),
    ],
)
def test_scorer_output_is_checked(raw: object, message: str) -> None:
    with pytest.raises(ScorerOutputError, match=message):
        normalise_output(raw)


def test_scorer_output_numbers_become_floats() -> None:
    assert normalise_output(True) == {"score": 1.0}
    result = normalise_output({"score": 1, "format_reward": 0})
    assert result == {"score": 1.0, "format_reward": 0.0}


def test_importing_the_package_does_not_load_sympy() -> None:
    # math-verify (and sympy, seconds to import) loads on the first math comparison, so a
    # trainer that only needs gsm8k or choice scoring does not pay for it.
    code = "import sys, omni_rewards; print(sorted({'sympy', 'math_verify'} & set(sys.modules)))"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"
