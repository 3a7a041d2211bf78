"""The built-in scorers' behaviour beyond parity: gsm8k flexible, MMK12, choice."""

from __future__ import annotations

import json

import pytest

from omni_rewards import compute_score
from omni_rewards.scorers import extract_gsm8k_answer
from omni_rewards.equivalence import math_equivalent
from omni_rewards.text import normalise_angles

OPTIONS = json.dumps({"A": "30°", "B": "45°", "C": "60°", "D": "\\frac{1}{2}"})


# --- gsm8k -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "strict", "flexible"),
    [
        ("so 3 + 4 = 7\n#### 7", "7", "7"),
        ("total: $1,234 in all", None, "1234"),
        ("no numbers here", None, None),
        ("ends with a lone period .", None, None),
        ("#### -12 then 5 apples", "-12", "5"),
    ],
)
def test_gsm8k_methods(text: str, strict: str | None, flexible: str | None) -> None:
    assert extract_gsm8k_answer(text, "strict") == strict
    assert extract_gsm8k_answer(text, "flexible") == flexible


def test_gsm8k_unknown_method_lists_the_methods() -> None:
    with pytest.raises(ValueError, match="choose one of strict, flexible"):
        extract_gsm8k_answer("#### 1", "loose")  # type: ignore[arg-type]


# --- MMK12 -------------------------------------------------------------------------------
# score = (accuracy + format_reward) / (1 + 0.3); format_reward is 0 / 0.15 / 0.3.


def mmk12(
    solution: str, truth: str, options: str | None = None, **kwargs: float
) -> dict[str, float]:
    extra = {"options": options} if options is not None else None
    return compute_score("mmk12", solution, truth, extra, **kwargs)


def test_mmk12_full_marks() -> None:
    # accuracy 1, format 0.15 + 0.15: (1 + 0.3) / 1.3 = 1
    assert mmk12("<think>...</think><answer>\\boxed{12}</answer>", "12") == {
        "score": 1.0,
        "accuracy": 1.0,
        "format_reward": 0.3,
        "data_problem": 0.0,
    }


@pytest.mark.parametrize(
    ("solution", "accuracy", "format_reward"),
    [
        ("<answer>12</answer>", 1.0, 0.15),  # one pair, no box
        ("so it is \\boxed{12}", 1.0, 0.0),  # no tags: the whole text is read
        # two pairs: the tag check fails, the box inside the first still counts
        ("<answer>\\boxed{12}</answer><answer>\\boxed{3}</answer>", 1.0, 0.15),
        ("<answer>\\boxed{3}</answer><answer>\\boxed{12}</answer>", 0.0, 0.15),  # first pair read
        ("</answer>\\boxed{12}<answer>", 1.0, 0.0),  # one of each, but no pair
        ("\\boxed{12}<answer>12</answer>", 1.0, 0.15),  # a box outside the tags does not count
        ("<answer>\\boxed {12}</answer>", 0.0, 0.15),  # "\boxed {": no box for either check
    ],
)
def test_mmk12_format_ladder(solution: str, accuracy: float, format_reward: float) -> None:
    result = mmk12(solution, "12")
    assert (result["accuracy"], result["format_reward"]) == (accuracy, format_reward)
    assert result["score"] == pytest.approx((accuracy + format_reward) / 1.3)


def test_mmk12_format_score_is_configurable() -> None:
    # format_score 1: one pair without a box earns 0.5; (1 + 0.5) / 2
    result = mmk12("<answer>12</answer>", "12", format_score=1.0)
    assert (result["score"], result["format_reward"]) == (0.75, 0.5)
    # format_score 0: accuracy alone
    assert mmk12("<answer>\\boxed{13}</answer>", "12", format_score=0.0)["score"] == 0.0
    with pytest.raises(ValueError, match="format_score must be a finite number >= 0"):
        mmk12("<answer>12</answer>", "12", format_score=-1.0)
    with pytest.raises(ValueError, match="math_verify_timeout must be > 0"):
        mmk12("<answer>12</answer>", "12", math_verify_timeout=0.0)


@pytest.mark.parametrize(
    ("answer", "truth"),
    [
        ("\\boxed{.5}", "5"),
        ("1 2", "12"),
        ("...7", "7"),
        ("\\boxed{13} and \\boxed{12}", "12"),  # math-verify reads the last box only
        ("\\boxed{1}\\boxed{2}", "12"),
    ],
)
def test_mmk12_pays_nothing_for_answers_that_only_look_like_the_truth(
    answer: str, truth: str
) -> None:
    assert mmk12(f"<answer>{answer}</answer>", truth)["accuracy"] == 0.0


@pytest.mark.parametrize(
    ("answer", "accuracy"),
    [
        ("\\boxed{B}", 1.0),
        ("The answer is (B).", 1.0),
        ("A is wrong, so B", 1.0),  # last standalone letter
        ("B, no wait, C", 0.0),
        ("C, which is 45°", 0.0),  # a wrong letter with the right value: the letter decides
        ("\\boxed{45°}", 0.5),  # the correct option's value instead of its letter
        ("\\boxed{45^\\circ}", 0.5),  # angle markers removed on both sides
        ("45", 0.5),
        ("\\boxed{30°}", 0.0),  # another option's value
        ("BEST answer", 0.0),  # letters inside words do not count, and no value matches
        ("b", 0.0),  # a lowercase letter is not a choice letter, and not the value
        ("", 0.0),
    ],
)
def test_mmk12_choice_accuracy(answer: str, accuracy: float) -> None:
    assert mmk12(f"<answer>{answer}</answer>", "B", OPTIONS)["accuracy"] == accuracy


def test_mmk12_lowercase_letter_truth_is_a_choice_question() -> None:
    # verl-omni's converter writes lowercase letters; "b" must not go to math-verify.
    assert mmk12("<answer>\\boxed{B}</answer>", "b", OPTIONS)["accuracy"] == 1.0
    assert mmk12("<answer>\\boxed{C}</answer>", "b", OPTIONS)["accuracy"] == 0.0
    assert mmk12("<answer>\\boxed{45}</answer>", "b", OPTIONS)["accuracy"] == 0.5


def test_mmk12_option_value_is_compared_as_written() -> None:
    # \frac{1}{2} vs 0.5 by math-verify: 0.5 credit
    assert mmk12("<answer>\\boxed{0.5}</answer>", "D", OPTIONS)["accuracy"] == 0.5
    # the content goes to math-verify as it is, boxes and all: math-verify reads the last
    # box, so a value followed by another box is that other value
    assert mmk12("<answer>\\boxed{0.5} \\boxed{2}</answer>", "D", OPTIONS)["accuracy"] == 0.0


def test_mmk12_choice_without_options_has_no_partial_credit() -> None:
    assert mmk12("<answer>\\boxed{45°}</answer>", "B")["accuracy"] == 0.0


def test_mmk12_malformed_options_are_a_counted_data_problem() -> None:
    for raw in ["{A: 30}", '["30", "45"]', "null", '{"B": ["45"]}']:
        result = mmk12("<answer>45</answer>", "B", raw)
        assert (result["accuracy"], result["data_problem"]) == (0.0, 1.0), raw
    assert mmk12("<answer>45</answer>", "B", "")["data_problem"] == 0.0  # absent: no options


@pytest.mark.parametrize(
    ("answer", "truth", "accuracy"),
    [
        ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("\\boxed{30^{\\circ}}", "30", 1.0),  # math-verify reads ^{\circ} itself
        ("\\boxed{30}", "30°", 1.0),
        ("\\boxed{30 \\circ}", "30", 1.0),
        ("\\boxed{\\sqrt{12}}", "2\\sqrt{3}", 1.0),
        ("\\boxed{31}", "30", 0.0),
        ("\\boxed{}", "30", 0.0),
        ("\\boxed{2}", "", 0.0),  # an empty ground truth never matches
    ],
)
def test_mmk12_numeric_and_latex(answer: str, truth: str, accuracy: float) -> None:
    assert mmk12(f"<answer>{answer}</answer>", truth)["accuracy"] == accuracy


# --- choice (AVQA) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("solution", "score"),
    [
        ("<think>the dog barks</think><answer>B</answer>", 1.0),
        ("<answer> B </answer>", 1.0),
        ("<answer>B</answer><answer>C</answer>", 1.0),  # the first payload counts
        ("<answer>C</answer><answer>B</answer>", 0.0),
        ("<answer></answer>", 0.0),
        ("<answer>A or B</answer>", 0.0),
        ("<answer>A, B, C, D</answer>", 0.0),
        ("<answer>E</answer>", 0.0),  # outside the options
        ("<answer>b</answer>", 0.0),
        ("<answer>(B)</answer>", 0.0),
        ("B", 0.0),  # no tags
        ("<answer>B", 0.0),  # unclosed
    ],
)
def test_choice_exact_match(solution: str, score: float) -> None:
    extra = {"options": ["A", "B", "C", "D"]}
    assert compute_score("avqa_r1_6k", solution, "<answer>B</answer>", extra)["score"] == score


def test_choice_accepts_a_bare_label_and_counts_an_empty_one() -> None:
    assert compute_score("avqa_r1_6k", "<answer>C</answer>", "C")["score"] == 1.0
    empty = compute_score("avqa_r1_6k", "<answer></answer>", "<answer> </answer>")
    assert empty == {"score": 0.0, "accuracy": 0.0, "data_problem": 1.0}


# --- text helpers and equivalence ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("30° + 45^\\circ + 60\\circ", "30 + 45 + 60"),
        ("30 ° and 7.5 ^\\circ", "30 and 7.5"),
        ("60^{\\circ}", "60^{\\circ}"),  # not after a number
        ("90\\degree, 90º", "90\\degree, 90º"),  # not these markers
        ("x°", "x°"),
    ],
)
def test_normalise_angles(text: str, normalised: str) -> None:
    assert normalise_angles(text) == normalised


def test_math_equivalent_respects_its_budget() -> None:
    assert math_equivalent("\\boxed{\\frac{2}{4}}", "0.5")
    # a budget already spent before the comparison: counted as not equivalent, as verl's
    # timed-out comparison is
    assert not math_equivalent("\\boxed{\\frac{1234}{2468}}", "0.5", budget_s=1e-9)
