"""Parity with verl's reference scorers on a corpus of correct, wrong, malformed,
adversarial, unicode, huge and nested-LaTeX responses.

gsm8k: our default (strict) method against verl's ``gsm8k.compute_score``.
math: our ``math`` scorer against verl's math-verify scorer logic.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from omni_rewards import compute_score

FILLER = "Let me think step by step. "


def gsm8k_corpus() -> list[tuple[str, str]]:
    cases: list[tuple[str, str]] = []
    truths = ["72", "-3", "1000", "0", "3.5", "18"]
    for truth in truths:
        cases += [
            (f"{FILLER}#### {truth}", truth),  # correct
            (f"{FILLER}#### {truth}\n", truth),
            (f"#### 999\n{FILLER}#### {truth}", truth),  # last answer counts
            (f"{FILLER}#### {truth}\n#### 999", truth),  # ... so this is wrong
            (f"{FILLER}####{truth}", truth),  # no space: no answer
            (f"{FILLER}####  {truth}", truth),  # two spaces: no answer
            (f"{FILLER}The answer is {truth}.", truth),  # no marker
            (f"{FILLER}#### ${truth}", truth),  # dollar before the number: no match
            (f"{FILLER}#### {truth} dollars", truth),
            (f"{FILLER}#### {truth}.", truth),  # trailing period is part of the match
            (f"{FILLER}#### {truth}0", truth),  # wrong
            (f"#### {truth}" + " pad" * 80, truth),  # answer outside the last 300 chars
            (f"#### {truth}" + "x" * (300 - len(truth) - 5), truth),  # exactly inside
            (f"#### {truth}" + "x" * (301 - len(truth) - 5), truth),  # one char outside
            (f"{FILLER}#### {truth}", f" {truth}"),  # ground truth is compared as given
        ]
    cases += [
        ("#### 1,000", "1000"),  # commas dropped
        ("#### 1,0,0,0", "1000"),
        ("#### 1,000", "1,000"),  # ... so a ground truth with commas never matches
        ("#### 4,2", "42"),
        ("#### 1.2.3", "1.2.3"),
        ("#### ,", ""),
        ("#### .", "."),
        ("#### -", "-"),
        ("#### --5", "-5"),
        ("#### -5", "-5"),
        ("#### 42.0", "42"),
        ("#### 0042", "42"),
        ("#### 1e5", "1"),
        ("#### 3/4", "3"),
        ("", "0"),
        ("####", "0"),
        ("#### ", "0"),
        ("\n\n#### 7\n\n", "7"),
        ("#### ٧٢", "72"),  # Arabic-Indic digits are not ASCII digits
        ("#### ７２", "72"),  # fullwidth digits
        ("#### 72", "٧٢"),
        ("答案是 #### 36", "36"),
        ("😀 #### 36 😀", "36"),
        ("#### 3\u200b6", "36"),  # zero-width space splits the number
        ("\u202e#### 63", "63"),
        ("#### 5\r\n", "5"),
        ("####\t5", "5"),
        ("### 5", "5"),
        ("##### 5", "5"),  # contains "#### 5"
        ("#### #### 5", "5"),
        ("#### 5 #### ", "5"),
        ("9" * 100_000 + "\n#### 9", "9"),  # huge
        ("#### " + "1" * 1000, "1" * 1000),  # the marker falls outside the window
        ("#### " + "1" * 290, "1" * 290),
        ("x" * 1_000_000 + "#### 8", "8"),
        ("<answer>#### 12</answer>", "12"),
        ("\\boxed{12}", "12"),
        ("#### -0", "0"),
        ("#### 00", "0"),
        ("#### 1,234,567.89", "1234567.89"),
    ]
    return cases


MATRIX = "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"


def math_corpus() -> list[tuple[str, str]]:
    cases: list[tuple[str, str]] = [
        ("The answer is \\boxed{\\frac{1}{2}}.", "0.5"),
        ("\\boxed{\\dfrac12}", "\\frac{1}{2}"),
        ("\\boxed{0.5}", "\\frac{1}{2}"),
        ("\\boxed{(x+1)^2}", "x^2+2x+1"),
        ("\\boxed{x^2+2x+1}", "(x+1)^2"),
        ("\\boxed{\\sqrt{2}}", "\\sqrt 2"),
        ("\\boxed{\\sqrt{8}}", "2\\sqrt{2}"),
        ("\\boxed{3}", "4"),
        ("\\boxed{-3}", "3"),
        ("\\boxed{\\frac{\\frac{1}{2}}{\\frac{3}{4}}}", "\\frac{2}{3}"),
        ("\\boxed{\\frac{1}{1+\\frac{1}{1+\\frac{1}{2}}}}", "\\frac{3}{5}"),
        ("\\boxed{{{{{7}}}}}", "7"),
        ("\\boxed{\\left(\\frac{1}{2}\\right)^{2}}", "\\frac14"),
        ("\\boxed{}", "0"),
        ("\\boxed{", "3"),
        ("\\boxed{3", "3"),
        ("\\boxed3", "3"),
        ("\\boxed 3", "3"),
        ("boxed{3}", "3"),
        ("The answer is 5", "5"),
        ("The answer is 5.", "6"),
        ("$5$", "5"),
        ("$$5$$", "5"),
        ("\\(5\\)", "5"),
        ("\\[5\\]", "5"),
        ("答案是 \\boxed{5}", "5"),
        ("\\boxed{五}", "5"),
        ("\\boxed{٥}", "5"),
        ("Ответ: \\boxed{12}", "12"),
        ("\\boxed{12} 😀", "12"),
        ("x" * 20_000 + " \\boxed{7}", "7"),
        ("\\boxed{7} " + "y" * 20_000, "7"),
        ("1 + " * 500 + "1 = \\boxed{501}", "501"),
        ("\\boxed{" + MATRIX + "}", MATRIX),
        ("\\boxed{" + MATRIX.replace("4", "5") + "}", MATRIX),
        ("\\boxed{30^\\circ}", "30"),
        ("\\boxed{30^{\\circ}}", "30^\\circ"),
        ("\\boxed{50\\%}", "50"),
        ("\\boxed{50\\%}", "0.5"),
        ("\\boxed{1,000}", "1000"),
        ("\\boxed{1{,}000}", "1000"),
        ("\\boxed{A}", "A"),
        ("\\boxed{(A)}", "A"),
        ("\\boxed{\\text{yes}}", "\\text{yes}"),
        ("\\boxed{x>2}", "x>2"),
        ("\\boxed{x \\geq 2}", "x\\ge 2"),
        ("\\boxed{(1,2]}", "(1,2]"),
        ("\\boxed{[1,2)}", "(1,2]"),
        ("\\boxed{\\{1,2,3\\}}", "\\{3,2,1\\}"),
        ("\\boxed{1,2,3}", "3,2,1"),
        ("\\boxed{2}\\boxed{3}", "3"),
        ("\\boxed{2}\\boxed{3}", "2"),
        ("\\fbox{3}", "3"),
        ("\\boxed{\\infty}", "\\infty"),
        ("\\boxed{-\\infty}", "\\infty"),
        ("\\boxed{\\pi}", "3.14159"),
        ("\\boxed{\\pi}", "\\pi"),
        ("\\boxed{2\\pi}", "\\tau"),
        ("\\boxed{e^{i\\pi}}", "-1"),
        ("\\boxed{\\sin^2 x + \\cos^2 x}", "1"),
        ("\\boxed{\\log_2 8}", "3"),
        ("\\boxed{\\binom{5}{2}}", "10"),
        ("\\boxed{5!}", "120"),
        ("\\boxed{10^{3}}", "1000"),
        ("\\boxed{1e3}", "1000"),
        ("\\boxed{x=3}", "3"),
        ("\\boxed{y=2x+1}", "2x+1"),
        ("\\boxed{x = 1 \\text{ or } x = 2}", "1,2"),
        ("\\boxed{\\frac{a}{b}}", "a/b"),
        ("\\boxed{a/b}", "\\frac{a}{b}"),
        ("\\boxed{3\\sqrt{3}/2}", "\\frac{3\\sqrt3}{2}"),
        ("\\boxed{\\$18}", "18"),
        ("\\boxed{18 \\text{ dollars}}", "18"),
        ("\\boxed{18\\,\\mathrm{cm}}", "18"),
        ("\\boxed{0.333}", "\\frac{1}{3}"),
        ("\\boxed{0.3333333}", "\\frac{1}{3}"),
        ("\\boxed{\\frac{1}{0}}", "0"),
        ("\\boxed{0/0}", "0"),
        ("\\boxed{\\\\}", "0"),
        ("\\boxed{\\frac{}{}}", "1"),
        ("\\boxed{}}}}", "0"),
        ("{{{{\\boxed{4}", "4"),
        ("\\boxed{\\boxed{\\boxed{4}}}", "4"),
        ("\\boxed{\\text{\\boxed{4}}}", "4"),
        ("<answer>\\boxed{9}</answer>", "9"),
        ("I cannot solve this.", "2"),
        ("", "2"),
        ("   ", "0"),
        ("\\boxed{2}", ""),
        ("\\boxed{2}", "}"),
        ("\\boxed{2}", "\\frac{"),
        ("\\boxed{a+b}", "b+a"),
        ("\\boxed{2a}", "a+a"),
        ("\\boxed{i}", "\\sqrt{-1}"),
        ("\\boxed{\\emptyset}", "\\varnothing"),
        ("\\boxed{\\mathbb{R}}", "(-\\infty,\\infty)"),
        ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\sin 60^\\circ"),
        ("\\boxed{\\overline{3}}", "3"),
        ("\\boxed{3.}", "3"),
        ("\\boxed{+3}", "3"),
        ("\\boxed{\\mathbf{7}}", "7"),
        ("\\boxed{\\textbf{7}}", "7"),
        ("\\boxed{7}" * 50, "7"),
        ("$\\frac{1}{2}$ and finally $\\frac{1}{3}$", "\\frac13"),
    ]
    return cases


GSM8K = gsm8k_corpus()
MATH = math_corpus()


def test_corpus_is_large_enough() -> None:
    assert len(GSM8K) + len(MATH) >= 200, (len(GSM8K), len(MATH))


def test_gsm8k_matches_verl_strict(verl_scorers: SimpleNamespace) -> None:
    mismatches = [
        (solution[-60:], truth, ours, theirs)
        for solution, truth in GSM8K
        if (ours := compute_score("openai/gsm8k", solution, truth)["score"])
        != (theirs := float(verl_scorers.gsm8k(solution, truth)))
    ]
    assert not mismatches
    # The corpus must exercise both outcomes, or parity proves little.
    scores = {compute_score("openai/gsm8k", s, t)["score"] for s, t in GSM8K}
    assert scores == {0.0, 1.0}


def test_math_matches_verl_math_verify(verl_scorers: SimpleNamespace) -> None:
    mismatches = [
        (solution[-60:], truth, ours, theirs)
        for solution, truth in MATH
        if (ours := compute_score("math", solution, truth)["score"])
        != (theirs := verl_scorers.math(solution, truth))
    ]
    assert not mismatches
    correct = sum(compute_score("math", s, t)["score"] for s, t in MATH)
    assert 0 < correct < len(MATH)


@pytest.mark.parametrize("solution", ["#### 5", "x" * 400 + "#### 5"])
def test_gsm8k_parity_holds_for_verl_int_zero(verl_scorers: SimpleNamespace, solution: str) -> None:
    # verl returns the int 0 when there is no answer; ours is always a float.
    ours = compute_score("openai/gsm8k", solution, "6")["score"]
    assert isinstance(ours, float) and ours == verl_scorers.gsm8k(solution, "6") == 0
