"""Differential test: our Geometry3K scorer against verl's own ``geo3k.compute_score`` on a
generated corpus. Every case must agree on the score, and on accuracy and format with
verl's ``acc_reward`` and ``format_reward``; every class below must be covered.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from omni_rewards import compute_score

verl_geo3k = pytest.importorskip("verl.utils.reward_score.geo3k")

MIN_CASES = 400
MIN_PER_CLASS = 6


@dataclass(frozen=True)
class Case:
    kind: str
    response: str
    truth: str
    kwargs: dict[str, Any] = field(default_factory=dict)


REASONING = "Angle ABC is 60, so x = 2 \\cdot 3 = 6; {braces} stay inside."


def layouts(content: str) -> Iterator[str]:
    """The same content with no think block, a tight one, and one spread over lines."""
    yield content
    yield f"<think>{REASONING}</think>{content}"
    yield f"<think>\n{REASONING}\n</think>\n\n{content}\n"


# (ground truth, forms that read the same or nearly so, wrong answers) per answer class.
ANSWER_FORMS: dict[str, list[tuple[str, list[str], list[str]]]] = {
    "right or wrong box": [
        ("3", ["3", "3.0", "03", "+3"], ["4", "-3", "30", "0.3"]),
        ("14.5", ["14.5", "14.50", "29/2"], ["14", "15", "145"]),
    ],
    "fraction": [
        ("\\frac{40}{3}", ["\\frac{40}{3}", "\\dfrac{40}{3}", "\\tfrac{40}{3}", "40/3", "\\frac{80}{6}",
                           "13\\frac{1}{3}", "{40}/{3}", "\\frac{40}{3}\\approx 13.3"], ["13.33", "\\frac{3}{40}"]),
        ("\\frac{1}{2}", ["1/2", "0.5", ".5", "\\frac12", "2/4"], ["2", "\\frac{1}{3}"]),
    ],
    "decimal": [
        ("7.5", ["7.5", "7.50", "15/2", "\\frac{15}{2}", "7\\frac{1}{2}", "7.5 units"], ["7.49", "7", "75"]),
        ("0.25", ["0.25", ".25", "1/4", "25\\%"], ["0.2", "2.5"]),
    ],
    "sqrt": [
        ("2\\sqrt{3}", ["2\\sqrt{3}", "2\\sqrt3", "2 \\sqrt{3}", "\\sqrt{12}", "2*sqrt(3)", "2√3", "2sqrt(3)"],
         ["3.46", "\\sqrt{3}", "3\\sqrt{2}"]),
        ("\\sqrt{3}", ["\\sqrt{3}", "\\sqrt3", "3^{1/2}", "\\frac{3}{\\sqrt{3}}"], ["1.73", "3"]),
        ("5\\sqrt{2}", ["5\\sqrt{2}", "\\sqrt{50}", "\\frac{10}{\\sqrt{2}}"], ["7.07", "2\\sqrt{5}"]),
    ],
    "pi": [
        ("16\\pi", ["16\\pi", "16 \\pi", "16π", "\\pi \\cdot 16", "16 pi"], ["50.27", "16", "8\\pi"]),
        ("\\frac{\\pi}{3}", ["\\frac{\\pi}{3}", "\\pi/3", "\\frac{1}{3}\\pi"], ["60", "1.05"]),
    ],
    "degrees": [
        ("60", ["60", "60^\\circ", "60^{\\circ}", "60°", "60 degrees", "60\\degree", "60 ^ \\circ", "m\\angle 1 = 60"],
         ["120", "30^\\circ"]),
        ("22.5", ["22.5^\\circ", "22.5°", "\\frac{45}{2}^\\circ"], ["45^\\circ"]),
    ],
    "units": [
        ("12", ["12 cm", "12 \\text{ cm}", "12 units", "12 square units", "12 m", "12 ft", "12 inches", "12 cm^2",
                "12 \\mathrm{cm}", "12 yards"], ["12 km", "13 cm"]),
        ("48.5", ["48.5 in.", "48.5 \\text{in}^2", "48.5 meters"], ["48 cm"]),
    ],
    "latex variants": [
        ("2\\sqrt{3}", ["\\left(2\\sqrt{3}\\right)", "$2\\sqrt{3}$", "\\text{2}\\sqrt{3}", "2\\cdot\\sqrt{3}",
                        "2\\times\\sqrt{3}", "\\displaystyle 2\\sqrt{3}", "\\mathbf{2\\sqrt{3}}"], []),
        ("8", ["\\text{8}", "\\textbf{8}", "$8$", "8.", "\\,8", "8\\,", "{8}", "8,000"], []),
    ],
}

NESTED = [
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),
    ("\\boxed{{3}}", "3"),
    ("\\boxed{{{3}}}", "3"),
    ("\\boxed{\\sqrt{\\frac{1}{2}}}", "\\frac{\\sqrt{2}}{2}"),
    ("\\boxed{x^{2}}", "x^2"),
    ("\\boxed{\\frac{1}{2}} }", "\\frac{1}{2}"),
    ("\\boxed{\\frac{1}{2}}}", "\\frac{1}{2}"),
    ("\\boxed{\\frac{1}{2}", "\\frac{1}{2}"),
    ("\\boxed{\\boxed{3}}", "3"),
    ("\\boxed{\\text{\\{3\\}}}", "3"),
    ("\\boxed{a}{b}", "a"),
    ("\\boxed{\\left\\{3\\right\\}}", "3"),
]

SEVERAL = [
    ("\\boxed{4} then \\boxed{3}", "3"),
    ("\\boxed{3} then \\boxed{4}", "3"),
    ("\\boxed{3}\\boxed{3}", "3"),
    ("First \\boxed{2\\sqrt{3}}, finally \\boxed{\\sqrt{12}}", "2\\sqrt{3}"),
    ("\\boxed{3} and \\boxed{}", "3"),
    ("\\boxed{}\\boxed{3}", "3"),
    ("\\boxed{3}, or \\boxed{3", "3"),
]

NO_BOX = ["3", "The answer is 3.", "x = 3", "\\fbox{3}", "\\box{3}", "boxed{3}", "\\boxed 3", "\\boxed {3}",
          "\\Boxed{3}", "None", "none"]

UNCLOSED = ["\\boxed{3", "\\boxed{", "\\boxed{\\frac{1}{2}", "\\boxed{3} and \\boxed{4", "\\boxed{{3}", "3}"]

THINK_VARIANTS = [
    "<think>r</think>\\boxed{3}",
    "<think></think>\\boxed{3}",
    "<think>r</think>\n\\boxed{3}",
    "<think>r</think>The answer is \\boxed{3}. Done",
    "<think>\nr\n</think>\n\\boxed{3}\n",
    "r</think>\\boxed{3}",  # missing open tag
    "Sure. <think>r</think>\\boxed{3}",  # text before <think>
    " <think>r</think>\\boxed{3}",
    "\n<think>r</think>\\boxed{3}",
    "\\boxed{3}<think>r</think>",  # boxed before think
    "<think>\\boxed{3}</think>",  # boxed only inside think
    "<think>\\boxed{4}</think>\\boxed{3}",
    "<think>r</think>\\boxed{3",  # unclosed box after think
    "<think>r</think>\\boxed{}",
    "<think>r\\boxed{3}",  # no closing tag
    "<think>r<think>r</think>\\boxed{3}",
    "<think>r</think></think>\\boxed{3}",
    "<think>r</think><think>s</think>\\boxed{3}",
    "<think>r</think>\\boxed{3}</think>",  # a later </think> with no box after it
    "<think>r</think>\\boxed{3}\n</think>\nso 3",
    "<THINK>r</THINK>\\boxed{3}",
    "<think >r</think>\\boxed{3}",
    "<think>r</ think>\\boxed{3}",
    "<think></think>",
    "<think>",
    "</think><think>\\boxed{3}",
    "<think>r</think>\\boxed{3}<answer>3</answer>",
    "<think>r}</think>\\boxed{3",
    "<think>r</think>}\\boxed{3",
    "<think>r</think>\\boxed{3}\n\n\n",
    "<think>r</think>\\boxed{3}\r\n",
    "<think>r\r\n</think>\r\n\\boxed{3}",
]

EMPTY = [("", "3"), ("", ""), ("\\boxed{}", ""), ("\\boxed{3}", ""), ("<think></think>\\boxed{}", ""),
         ("", "None"), ("\\boxed{}", "3"), ("<think></think>", "")]

WHITESPACE = [" \\boxed{ 3 } ", "\\boxed{3 }", "\\boxed{ 3}", "\\boxed{\n3\n}", "\\boxed{3}\n", "   ", "\n\n",
              "\t\\boxed{3}", "\\boxed{\t3\t}", "\\boxed{3 0}", "\\boxed{ }", "\u00a0\\boxed{3}", "\\boxed{3\u00a0}"]

KWARGS: list[dict[str, Any]] = [{"use_boxed": False}, {"format_score": 0.0}, {"format_score": 0.3}, {"format_score": 1.0},
          {"use_boxed": False, "format_score": 0.5}]


def answer_cases() -> Iterator[Case]:
    for kind, answers in ANSWER_FORMS.items():
        for truth, right, wrong in answers:
            for written in right + wrong:
                for response in layouts(f"The answer is \\boxed{{{written}}}."):
                    yield Case(kind, response, truth)


def structure_cases() -> Iterator[Case]:
    for response, truth in NESTED:
        for laid_out in layouts(response):
            yield Case("nested braces", laid_out, truth)
    for response, truth in SEVERAL:
        for laid_out in layouts(response):
            yield Case("several boxes", laid_out, truth)
    for response in NO_BOX:
        for laid_out in layouts(response):
            yield Case("no box", laid_out, "3")
    yield Case("no box", "None", "None")
    for response in UNCLOSED:
        for laid_out in layouts(response):
            yield Case("unclosed box", laid_out, "3")


def format_cases() -> Iterator[Case]:
    for response in THINK_VARIANTS:
        for truth in ("3", "4"):
            yield Case("think format", response, truth)


def edge_cases() -> Iterator[Case]:
    for response, truth in EMPTY:
        yield Case("empty strings", response, truth)
        yield Case("empty strings", f"<think></think>{response}", truth)
    for response in WHITESPACE:
        for truth in ("3", " 3 "):
            yield Case("whitespace", response, truth)
            yield Case("whitespace", f"<think> </think> {response}", truth)
    for kwargs in KWARGS:
        for response, truth in [("<think>r</think>\\boxed{3}", "3"), ("3", "3"), ("\\boxed{3}", "3"),
                                ("<think>r</think>\\boxed{4}", "3"), ("<think>r</think>3", "3")]:
            yield Case("scorer options", response, truth, kwargs)


def corpus() -> list[Case]:
    return [*answer_cases(), *structure_cases(), *format_cases(), *edge_cases()]


CLASSES = {*ANSWER_FORMS, "nested braces", "several boxes", "no box", "unclosed box", "think format",
           "empty strings", "whitespace", "scorer options"}


def verl_result(case: Case) -> tuple[float, float, float]:
    use_boxed = case.kwargs.get("use_boxed", True)
    score = verl_geo3k.compute_score(case.response, case.truth, **case.kwargs)
    accuracy = verl_geo3k.acc_reward(case.response, case.truth, use_boxed=use_boxed)
    return score, accuracy, verl_geo3k.format_reward(case.response)


def our_result(case: Case) -> tuple[float, float, float]:
    out = compute_score("hiyouga/geometry3k", case.response, case.truth, **case.kwargs)
    assert isinstance(out, dict) and all(isinstance(v, float) for v in out.values()), out
    return out["score"], out["accuracy"], out["format"]


def test_corpus_covers_every_class() -> None:
    cases = corpus()
    counts = Counter(case.kind for case in cases)
    assert len(cases) >= MIN_CASES, len(cases)
    assert counts.keys() == CLASSES
    assert min(counts.values()) >= MIN_PER_CLASS, counts


def test_scores_agree_with_verl_on_every_case() -> None:
    cases = corpus()
    start = time.perf_counter()
    results = [(case, our_result(case), verl_result(case)) for case in cases]
    elapsed = time.perf_counter() - start
    disagreements = [result for result in results if result[1] != result[2]]
    assert not disagreements, disagreements[:5]
    # The corpus must exercise all four outcomes, not just agree on zeros.
    outcomes = Counter(theirs[0] for case, _, theirs in results if not case.kwargs)
    assert {0.0, 0.1, 0.9, 1.0} <= outcomes.keys(), outcomes
    assert elapsed < 60, f"{len(cases)} cases took {elapsed:.1f} s"


def test_both_names_reach_the_scorer() -> None:
    # verl's key and a short one; (1 - 0.1) * 1 + 0.1 * 1 = 1.0 for a right, well-formed answer.
    for name in ("hiyouga/geometry3k", "geometry3k"):
        out = compute_score(name, "<think>2+1</think>\\boxed{3}", "3")
        assert out == {"score": 1.0, "accuracy": 1.0, "format": 1.0}


@pytest.mark.parametrize("format_score", [-0.1, 1.5, float("nan")])
def test_format_score_outside_zero_one_is_refused(format_score: float) -> None:
    with pytest.raises(ValueError, match="format_score must be between 0 and 1"):
        compute_score("geometry3k", "\\boxed{3}", "3", format_score=format_score)
