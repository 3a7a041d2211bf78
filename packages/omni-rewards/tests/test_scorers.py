"""The built-in scorers' behaviour beyond parity: gsm8k flexible, MMK12, choice."""

from __future__ import annotations

import json

import pytest

from omni_rewards import compute_score
from omni_rewards.scorers import extract_gsm8k_answer
from omni_rewards.text import last_boxed_content, normalise_angles

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


def mmk12(
    solution: str, truth: str, options: str | None = None, **kwargs: float
) -> dict[str, float]:
    extra = {"options": options} if options is not None else None
    return compute_score("mmk12", solution, truth, extra, **kwargs)


def test_mmk12_full_marks() -> None:
    # accuracy 1, format 1: (1 + 0.3 * 1) / 1.3 = 1
    assert mmk12("<think>...</think><answer>\\boxed{12}</answer>", "12") == {
        "score": 1.0,
        "accuracy": 1.0,
        "format_reward": 1.0,
    }


def test_mmk12_format_is_progressive() -> None:
    # one pair without \boxed: format 0.5 -> (1 + 0.15) / 1.3
    assert mmk12("<answer>12</answer>", "12")["score"] == pytest.approx(1.15 / 1.3)
    # no tags: accuracy from the whole text, format 0 -> 1 / 1.3
    result = mmk12("so it is \\boxed{12}", "12")
    assert (result["accuracy"], result["format_reward"]) == (1.0, 0.0)
    assert result["score"] == pytest.approx(1 / 1.3)
    # two pairs: format 0, accuracy from the last payload
    two_pairs = mmk12("<answer>\\boxed{3}</answer><answer>\\boxed{12}</answer>", "12")
    assert (two_pairs["accuracy"], two_pairs["format_reward"]) == (1.0, 0.0)
    # a closing tag before the opening one is not a pair
    assert mmk12("</answer>\\boxed{12}<answer>", "12")["format_reward"] == 0.0
    # \boxed outside the answer tags does not count
    assert mmk12("\\boxed{12}<answer>12</answer>", "12")["format_reward"] == 0.5


def test_mmk12_wrong_answer_keeps_only_the_format_share() -> None:
    # (0 + 0.3) / 1.3
    assert mmk12("<answer>\\boxed{13}</answer>", "12")["score"] == pytest.approx(0.3 / 1.3)


def test_mmk12_format_weight_is_configurable() -> None:
    # weight 1: (1 + 0.5) / 2
    assert mmk12("<answer>12</answer>", "12", format_weight=1.0)["score"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="format_weight must be >= 0"):
        mmk12("<answer>12</answer>", "12", format_weight=-1.0)


@pytest.mark.parametrize(
    ("answer", "accuracy"),
    [
        ("\\boxed{B}", 1.0),
        ("The answer is (B).", 1.0),
        ("A is wrong, so B", 1.0),  # last standalone letter
        ("B, no wait, C", 0.0),
        ("\\boxed{45°}", 0.5),  # the correct option's value instead of its letter
        ("\\boxed{45^\\circ}", 0.5),  # angle symbols normalised
        ("45", 0.5),
        ("\\boxed{30°}", 0.0),  # another option's value
        ("BEST answer", 0.0),  # letters inside words do not count
        ("", 0.0),
    ],
)
def test_mmk12_choice_accuracy(answer: str, accuracy: float) -> None:
    assert mmk12(f"<answer>{answer}</answer>", "B", OPTIONS)["accuracy"] == accuracy


def test_mmk12_choice_value_credit_uses_math_equivalence() -> None:
    assert mmk12("<answer>\\boxed{0.5}</answer>", "D", OPTIONS)["accuracy"] == 0.5


def test_mmk12_choice_without_options_has_no_partial_credit() -> None:
    assert mmk12("<answer>\\boxed{45°}</answer>", "B")["accuracy"] == 0.0


def test_mmk12_options_may_be_a_mapping() -> None:
    assert mmk12("<answer>45°</answer>", "B", None)["accuracy"] == 0.0
    result = compute_score("mmk12", "<answer>45°</answer>", "B", {"options": {"B": "45°"}})
    assert result["accuracy"] == 0.5


def test_mmk12_malformed_options_explain_the_expected_shape() -> None:
    with pytest.raises(ValueError, match=r"not valid JSON.*expected a JSON object"):
        mmk12("<answer>45</answer>", "B", "{A: 30}")
    with pytest.raises(ValueError, match="must map option letters to values, got list"):
        mmk12("<answer>45</answer>", "B", '["30", "45"]')


@pytest.mark.parametrize(
    ("answer", "truth", "accuracy"),
    [
        ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("\\boxed{30^{\\circ}}", "30", 1.0),
        ("\\boxed{30}", "30°", 1.0),
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


def test_choice_accepts_a_bare_label_and_refuses_an_empty_one() -> None:
    assert compute_score("avqa_r1_6k", "<answer>C</answer>", "C")["score"] == 1.0
    with pytest.raises(ValueError, match="Empty choice label"):
        compute_score("avqa_r1_6k", "<answer>C</answer>", "<answer> </answer>")


# --- text helpers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("\\boxed{1} and \\boxed{\\frac{2}{3}}", "\\frac{2}{3}"),
        ("\\boxed {x}", "x"),
        ("\\boxed{unclosed", None),
        ("nothing", None),
        ("\\boxed{}", ""),
    ],
)
def test_last_boxed_content(text: str, content: str | None) -> None:
    assert last_boxed_content(text) == content


def test_normalise_angles() -> None:
    assert normalise_angles("30° + 45^\\circ + 60^{\\circ} + 90\\degree") == "30 + 45 + 60 + 90"
