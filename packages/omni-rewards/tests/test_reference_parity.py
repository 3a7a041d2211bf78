"""Differential test: our MMK12 and choice scorers against the seeds' reference formulas
(the test oracle in ``omni_rewards_reference_oracle.py``) on a generated corpus that covers
every class issue 16 lists. Every case must agree on score, accuracy and format reward.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from omni_rewards import compute_score


def load_oracle() -> ModuleType:
    """The oracle module, by path (tests run in importlib mode, without sys.path entries)."""
    name = "omni_rewards_reference_oracle"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


ORACLE = load_oracle()
mmk12_reference = ORACLE.mmk12_reference
choice_reference = ORACLE.choice_reference


@dataclass(frozen=True)
class Case:
    kind: str
    solution: str
    truth: str
    extra_info: dict[str, Any] | None = None
    format_score: float = 0.3


OPTIONS = {"A": "30°", "B": "45^\\circ", "C": "\\frac{1}{2}", "D": "2\\sqrt{3}", "E": "x+1"}
PLAIN_OPTIONS = {"A": "12", "B": "7", "C": "0.25", "D": "-3", "E": "\\pi"}
THINK = "<think>Angles: 30° and 45^\\circ; A is not it, maybe B. Then 12 - 5 = 7.</think>"


def wrappers(content: str) -> Iterator[tuple[str, str]]:
    """The same content in every answer-tag layout of the format ladder."""
    yield "bare", content
    yield "think+bare", THINK + content
    yield "one pair", f"{THINK}<answer>{content}</answer>"
    yield "one pair, spaced", f"<answer>\n  {content}\n</answer>"
    yield "boxed inside", f"{THINK}<answer>The answer is \\boxed{{{content}}}.</answer>"
    yield "boxed outside", f"\\boxed{{{content}}}<answer>{content}</answer>"
    yield "unclosed", f"<answer>\\boxed{{{content}}}"
    yield "closing only", f"\\boxed{{{content}}}</answer>"
    yield "reversed", f"</answer>\\boxed{{{content}}}<answer>"
    yield "two pairs", f"<answer>\\boxed{{{content}}}</answer><answer>\\boxed{{{content}}}</answer>"
    yield "two opens", f"<answer><answer>\\boxed{{{content}}}</answer>"
    yield "two closes", f"<answer>\\boxed{{{content}}}</answer></answer>"
    yield "boxed with space", f"<answer>\\boxed {{{content}}}</answer>"
    yield "boxed unclosed", f"<answer>\\boxed{{{content}</answer>"


def tag_order_cases() -> Iterator[Case]:
    for right, wrong, truth in [("12", "13", "12"), ("B", "C", "B"), ("\\frac{1}{2}", "2", "0.5")]:
        extra = {"options": json.dumps(OPTIONS)}
        for first, second in [(right, wrong), (wrong, right)]:
            for boxed in (False, True):
                a, b = (f"\\boxed{{{first}}}", f"\\boxed{{{second}}}") if boxed else (first, second)
                yield Case("first vs last answer tag", f"<answer>{a}</answer> <answer>{b}</answer>", truth, extra)
                yield Case("first vs last answer tag", f"<answer>{a}</answer>{THINK}<answer>{b}", truth, extra)


def ladder_cases() -> Iterator[Case]:
    for content, truth in [("12", "12"), ("13", "12"), ("B", "B"), ("A", "B"), ("\\frac{3}{6}", "0.5")]:
        for _, solution in wrappers(content):
            yield Case("tag count ladder", solution, truth, {"options": json.dumps(OPTIONS)})


SHORTCUT_TRAPS = [
    ("\\boxed{.5}", "5"),
    ("1 2", "12"),
    ("\\boxed{1 2}", "12"),
    ("...7", "7"),
    ("\\boxed{...7}", "7"),
    ("\\boxed{13} and \\boxed{12}", "12"),
    ("\\boxed{12} and \\boxed{13}", "12"),
    ("\\boxed{1}\\boxed{2}", "12"),
    ("1,2", "12"),
    ("12.", "12"),
    ("012", "12"),
    ("$12$", "12"),
    ("\\boxed{12\\%}", "12"),
    ("\\boxed{-12}", "12"),
    ("\\boxed{\\frac{24}{2}}", "12"),
    ("\\boxed{12.0}", "12"),
    ("twelve", "12"),
    ("\\boxed{1.2}", "12"),
    ("\\boxed{12}", "1.2"),
    ("\\boxed{5}", ".5"),
    ("\\boxed{0.5}", ".5"),
    ("\\boxed{x^2-1}", "x^2-1"),
    ("x^2-1", "x^2-1"),
    ("\\boxed{(x-1)(x+1)}", "x^2-1"),
    ("\\boxed{x^2+1}", "x^2-1"),
    ("\\boxed{\\sqrt{12}}", "2\\sqrt{3}"),
    ("\\boxed{2\\sqrt{3}}", "\\sqrt{12}"),
    ("\\boxed{3\\sqrt{2}}", "2\\sqrt{3}"),
    ("\\boxed{}", "12"),
    ("\\boxed{12", "12"),
    ("\\boxed12", "12"),
    ("{12}", "12"),
    ("12 or 13", "12"),
    ("13 or 12", "12"),
    ("\\boxed{2}", ""),
    ("\\boxed{\\text{12}}", "12"),
    ("\\boxed{12 \\text{cm}}", "12"),
    ("\\boxed{7/2}", "3.5"),
    ("\\boxed{3\\frac{1}{2}}", "3.5"),
    ("\\boxed{\\pi}", "\\pi"),
    ("\\boxed{3.14}", "\\pi"),
]


def shortcut_cases() -> Iterator[Case]:
    for written, truth in SHORTCUT_TRAPS:
        yield Case("boxed shortcut traps", f"<answer>{written}</answer>", truth)
        yield Case("boxed shortcut traps", f"{THINK}<answer>The answer is {written}.</answer>", truth)
        yield Case("boxed shortcut traps", f"So {written}", truth)


DEGREE_FORMS = ["{v}", "{v}°", "{v} °", "{v}^\\circ", "{v} ^\\circ", "{v}\\circ", "{v}^{\\circ}",
                "{v}\\degree", "{v}º", "{v}°C", "\\angle A = {v}°", "{v}^\\circ + 5^\\circ"]


def degree_cases() -> Iterator[Case]:
    rng = random.Random(16)
    for value in ("30", "45", "60.5", "120", "٣٠"):
        for form in DEGREE_FORMS:
            written = form.replace("{v}", value)
            truth_form = rng.choice(DEGREE_FORMS[:8])
            yield Case("degree markers", f"<answer>\\boxed{{{written}}}</answer>", truth_form.replace("{v}", value))
            yield Case("degree markers", f"<answer>{written}</answer>", value)
            yield Case("degree markers", f"<answer>\\boxed{{{value}}}</answer>", written)


LETTER_ANSWERS = ["{l}", "\\boxed{{{l}}}", "({l})", "{l}.", "Answer: {l}", "the answer is {l}", "{ll}",
                  "\\boxed{{{ll}}}", "BEST", "A or {l}", "{l} or A", "{l}E", "option{l}", "{l}\\%"]


def letter_cases() -> Iterator[Case]:
    extra = {"options": json.dumps(OPTIONS)}
    for truth in ["A", "b", "C", "d", "E", "e", " B ", "B\n"]:
        for guess in "ABCE":
            for form in LETTER_ANSWERS:
                written = form.format(l=guess, ll=guess.lower())
                yield Case("letter ground truths, either case", f"<answer>{written}</answer>", truth, extra)
    for truth in ["F", "f", "AB", "a)", "1"]:  # not choice letters: math verification
        yield Case("letter ground truths, either case", f"<answer>\\boxed{{{truth}}}</answer>", truth, extra)


def wrong_letter_cases() -> Iterator[Case]:
    extra = {"options": json.dumps(OPTIONS)}
    for truth, value in [("B", "45°"), ("C", "\\frac{1}{2}"), ("D", "2\\sqrt{3}"), ("b", "45")]:
        for other in "ACE":
            if other == truth.upper():
                continue
            for written in [f"{other}, {value}", f"\\boxed{{{other}}} ({value})", f"{value} so {other}"]:
                yield Case("wrong letter with correct value", f"<answer>{written}</answer>", truth, extra)


def option_value_cases() -> Iterator[Case]:
    for options in (OPTIONS, PLAIN_OPTIONS):
        extra = {"options": json.dumps(options)}
        for truth in ["A", "B", "C", "D", "E", "a", "c", "e"]:
            value = options[truth.upper()]
            for written in [value, f"\\boxed{{{value}}}", f"${value}$", f"\\boxed{{{value}}} cm",
                            "\\boxed{0.5}", "\\boxed{30}", "\\boxed{45}", "\\sqrt{12}", "7", "x + 1",
                            "\\boxed{\\boxed{" + value + "}}", "\\fbox{" + value + "}"]:
                yield Case("value against option text", f"<answer>{written}</answer>", truth, extra)
                yield Case("value against option text", written, truth, extra)


MALFORMED_OPTIONS: list[Any] = [
    "{A: 30, B: 45}", "[\"30\", \"45\"]", "null", "5", "\"B\"", "{}", "", "{\"b\": \"45\"}",
    "{\"B\": \"\"}", "{\"B\": \"45\"", None, "true",
]


def malformed_options_cases() -> Iterator[Case]:
    for raw in MALFORMED_OPTIONS:
        extra = {"options": raw}
        for written in ["\\boxed{45}", "45", "B", "\\boxed{C}"]:
            yield Case("malformed options", f"<answer>{written}</answer>", "B", extra)
    yield Case("malformed options", "<answer>45</answer>", "B", {})
    yield Case("malformed options", "<answer>45</answer>", "B", {"other": 1})


def format_score_cases() -> Iterator[Case]:
    for format_score in (0.0, 0.1, 0.3, 0.5, 1.0):
        for _, solution in wrappers("12"):
            yield Case("format_score values", solution, "12", None, format_score)


def random_math_cases(count: int) -> Iterator[Case]:
    rng = random.Random(1616)
    for _ in range(count):
        a, b = rng.randint(1, 40), rng.randint(2, 40)
        forms = [
            (str(a * b), [str(a * b), f"{a}\\times{b}", str(a * b + 1), f"{a * b}.0", f"0{a * b}"]),
            (f"\\frac{{{a}}}{{{b}}}", [f"\\frac{{{2 * a}}}{{{2 * b}}}", f"{a}/{b}", f"{a / b:.4f}",
                                      f"\\frac{{{b}}}{{{a}}}", f"\\dfrac{{{a}}}{{{b}}}"]),
            (f"{a}\\sqrt{{{b}}}", [f"\\sqrt{{{a * a * b}}}", f"{a}\\sqrt{b}", f"{a + 1}\\sqrt{{{b}}}"]),
            (f"-{a}", [f"-{a}", str(a), f"- {a}", f"(-{a})"]),
            (f"{a}^\\circ", [f"{a}°", f"{a}", f"{a + 1}°", f"{a}^{{\\circ}}"]),
            (f"x^2-{a * a}", [f"(x-{a})(x+{a})", f"x^2 - {a * a}", f"x^2+{a * a}"]),
        ]
        truth, candidates = rng.choice(forms)
        written = rng.choice(candidates)
        layout = rng.choice(list(wrappers(written)))[1]
        yield Case("random values and layouts", layout, truth)


def mmk12_corpus() -> list[Case]:
    cases = [
        *tag_order_cases(), *ladder_cases(), *shortcut_cases(), *degree_cases(),
        *letter_cases(), *wrong_letter_cases(), *option_value_cases(),
        *malformed_options_cases(), *format_score_cases(),
    ]
    return cases + list(random_math_cases(150))


CORPUS = mmk12_corpus()


def ours(case: Case) -> dict[str, float]:
    result = compute_score("mmk12", case.solution, case.truth, case.extra_info, format_score=case.format_score)
    return {key: result[key] for key in ("score", "accuracy", "format_reward")}


@pytest.fixture(scope="module")
def verify(verl_scorers: SimpleNamespace) -> Callable[[str, str], float]:
    return verl_scorers.verify_boxed


def test_corpus_covers_every_class() -> None:
    kinds = Counter(case.kind for case in CORPUS)
    assert len(CORPUS) >= 800, len(CORPUS)
    expected = {
        "first vs last answer tag", "tag count ladder", "boxed shortcut traps", "degree markers",
        "letter ground truths, either case", "wrong letter with correct value",
        "value against option text", "malformed options", "format_score values",
        "random values and layouts",
    }
    assert set(kinds) == expected
    assert min(kinds.values()) >= 20, kinds


def test_mmk12_agrees_with_the_reference_on_every_case(verify: Callable[[str, str], float]) -> None:
    disagreements = []
    outcomes: Counter[tuple[float, float]] = Counter()
    per_kind: Counter[str] = Counter()
    for case in CORPUS:
        mine = ours(case)
        reference = mmk12_reference(case.solution, case.truth, case.extra_info, verify, case.format_score)
        if mine != reference:
            disagreements.append((case, mine, reference))
        else:
            per_kind[case.kind] += 1
        if case.format_score == 0.3:
            outcomes[(reference["accuracy"], reference["format_reward"])] += 1
    report = "\n".join(f"{c.kind}: {c.solution!r} vs {c.truth!r} ours={m} ref={r}" for c, m, r in disagreements[:20])
    print(f"agreed on {len(CORPUS) - len(disagreements)}/{len(CORPUS)}: {dict(per_kind)}")
    assert not disagreements, f"{len(disagreements)} of {len(CORPUS)} disagree:\n{report}"
    # The corpus must reach every rung: accuracy 0 / 0.5 / 1 and format 0 / 0.15 / 0.3.
    assert {accuracy for accuracy, _ in outcomes} == {0.0, 0.5, 1.0}
    assert {fmt for _, fmt in outcomes} == {0.0, 0.15, 0.3}
    assert all(outcomes[(accuracy, 0.15)] for accuracy in (0.0, 1.0)), outcomes


def choice_corpus() -> list[tuple[str, str]]:
    truths = ["<answer>B</answer>", "<answer> C </answer>", "<answer>A</answer>\n", "<answer>cat</answer>"]
    answers = ["B", " B ", "b", "C", "A", "(B)", "B.", "A or B", "", "cat", " cat", "D"]
    cases = []
    for truth in truths:
        for answer in answers:
            cases += [
                (f"<think>hmm</think><answer>{answer}</answer>", truth),
                (f"<answer>{answer}</answer><answer>C</answer>", truth),
                (f"<answer>C</answer><answer>{answer}</answer>", truth),
                (f"<answer>{answer}", truth),
                (answer, truth),
                (f"<answer>\n{answer}\n</answer>", truth),
            ]
    return cases


def test_choice_agrees_with_the_reference_on_every_case() -> None:
    cases = choice_corpus()
    disagreements = [
        (solution, truth)
        for solution, truth in cases
        if {k: v for k, v in compute_score("avqa_r1_6k", solution, truth).items() if k != "data_problem"}
        != choice_reference(solution, truth)
    ]
    assert not disagreements, disagreements[:10]
    assert {choice_reference(s, t)["score"] for s, t in cases} == {0.0, 1.0}


# --- the deliberate differences (each documented in the scorer's docstring) ---------------


def test_option_text_with_a_degree_sign_can_earn_the_half_credit() -> None:
    # The reference's docstring promises 0.5 for the option's value; its code passes "45°"
    # to math-verify unnormalised, which never matches. We follow the docstring:
    # accuracy 0.5, format 0.3 (one pair + boxed): (0.5 + 0.3) / 1.3.
    result = compute_score("mmk12", "<answer>\\boxed{45}</answer>", "B", {"options": json.dumps({"B": "45°"})})
    assert (result["accuracy"], result["format_reward"]) == (0.5, 0.3)
    assert result["score"] == pytest.approx(0.8 / 1.3)


def test_malformed_options_are_counted_as_a_data_problem() -> None:
    for raw in MALFORMED_OPTIONS:
        result = compute_score("mmk12", "<answer>45</answer>", "B", {"options": raw})
        malformed = raw not in (None, "", "{}") and raw != '{"b": "45"}' and raw != '{"B": ""}'
        assert result["data_problem"] == float(malformed), raw
        assert result["accuracy"] == 0.0


def test_options_as_a_mapping_are_read() -> None:
    result = compute_score("mmk12", "<answer>45</answer>", "b", {"options": {"B": "45°"}})
    assert result["accuracy"] == 0.5 and result["data_problem"] == 0.0


def test_a_blank_choice_label_pays_nothing_and_is_counted() -> None:
    # The reference would pay 1.0 here: an empty answer "equals" the blank label.
    for truth in ["<answer> </answer>", "<answer></answer>", "", "   "]:
        for solution in ["<answer></answer>", "no tags at all", "<answer>B</answer>"]:
            result = compute_score("avqa_r1_6k", solution, truth)
            assert result == {"score": 0.0, "accuracy": 0.0, "data_problem": 1.0}
    assert choice_reference("<answer></answer>", "<answer> </answer>")["score"] == 1.0


def test_a_bare_choice_label_is_read_as_the_label() -> None:
    # verl-omni's converter always tags the label; a bare "C" is read as the label itself,
    # where the reference would compare against "" (and pay for an untagged response).
    assert compute_score("avqa_r1_6k", "<answer>C</answer>", "C")["score"] == 1.0
    assert compute_score("avqa_r1_6k", "no answer", "C")["score"] == 0.0
    assert choice_reference("no answer", "C")["score"] == 1.0
