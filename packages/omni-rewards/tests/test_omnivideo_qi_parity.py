"""Differential test: the OmniVideo-R1 QI rule reward against a TEST ORACLE of verl-omni
6feb242a's ``omnivideo_qi.py`` (``parse_response``, ``_choice_letter``, ``_normalize_text``
and ``compute_score`` where it asks no judge), on a generated corpus of responses.

The oracle below is written from the reference's facts, independently of
``omni_rewards``: it scans strings instead of using regular expressions, and replays the
search order of the reference's regular expression by hand. The facts:

- A response is in the template when, after leading whitespace, it is one or more pairs
  ``<time>S-E</time><caption>C</caption>`` (S and E: one or more decimal digits, ``.``,
  one digit), each followed by optional whitespace, then ``<thinking>T</thinking>``,
  optional whitespace, ``<answer>A</answer>`` and optional whitespace to the end. C, T and
  A may hold anything, tags too: the regular expression takes the shortest caption,
  thinking and answer that let the whole response match, trying more pairs before ending
  the pairs. The pairs are then re-read from the pairs' text left to right, each the first
  ``<time>S-E</time><caption>`` with a later ``</caption>`` (skipping anything else).
- Format holds when there is at least one pair and at most ``max_segments`` (8), the
  stripped thinking and answer are non-empty, and each pair has a non-empty stripped
  caption, ``0 <= S < E`` and S no earlier than the previous pair's E.
- Outside the template: no pairs, and the answer is the stripped text between the first
  ``<answer>`` and the next ``</answer>`` (empty without both).
- Choice letter: after leading whitespace, one of A-H in either case (upper-cased),
  followed by ``.``, ``)``, ``:``, whitespace or the end.
- Normalized text: case-folded, each character that is not a letter, digit, number,
  underscore or whitespace becomes a space, whitespace runs collapse, ends trimmed.
- Without a judge (multiple choice, no pairs): score = format + answer (letter match),
  consistency = completeness = intent = 0, num_groundings = 0.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from omni_rewards import compute_score
from omni_rewards.errors import JudgeRequiredError, RewardError
from omni_rewards.scorers import omnivideo_qi as qi

# --- the oracle ---------------------------------------------------------------------------

T_OPEN, T_CLOSE, C_OPEN, C_CLOSE = "<time>", "</time>", "<caption>", "</caption>"
TH_OPEN, TH_CLOSE, A_OPEN, A_CLOSE = "<thinking>", "</thinking>", "<answer>", "</answer>"


def skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def one_decimal(text: str, i: int) -> int | None:
    """End of ``digits.digit`` at ``i``, or None."""
    j = i
    while j < len(text) and text[j].isdecimal():
        j += 1
    if j == i or j + 1 >= len(text) or text[j] != "." or not text[j + 1].isdecimal():
        return None
    return j + 2


def header(text: str, i: int) -> tuple[float, float, int] | None:
    """``<time>S-E</time><caption>`` at ``i``: (S, E, where the caption starts)."""
    if not text.startswith(T_OPEN, i):
        return None
    a = i + len(T_OPEN)
    b = one_decimal(text, a)
    if b is None or not text.startswith("-", b):
        return None
    c = one_decimal(text, b + 1)
    if c is None or not text.startswith(T_CLOSE + C_OPEN, c):
        return None
    return float(text[a:b]), float(text[b + 1 : c]), c + len(T_CLOSE) + len(C_OPEN)


def tail(text: str, i: int) -> tuple[str, str] | None:
    """``<thinking>T</thinking> <answer>A</answer>`` from ``i`` to the end: (T, A)."""
    if not text.startswith(TH_OPEN, i):
        return None
    body = i + len(TH_OPEN)
    last_close = text.rfind(A_CLOSE)
    if last_close < 0 or text[last_close + len(A_CLOSE) :].strip():
        return None
    close = text.find(TH_CLOSE, body)
    while close >= 0:
        a = skip_space(text, close + len(TH_CLOSE))
        if text.startswith(A_OPEN, a) and last_close >= a + len(A_OPEN):
            return text[body:close], text[a + len(A_OPEN) : last_close]
        close = text.find(TH_CLOSE, close + 1)
    return None


def template(text: str) -> tuple[str, str, str] | None:
    """(the pairs' text, thinking, answer) when ``text`` is in the template, else None."""
    first = skip_space(text, 0)
    ends: dict[int, int | None] = {}

    def pairs_end(i: int) -> int | None:  # where the pairs end, trying more pairs first
        if i not in ends:
            ends[i] = None
            found = header(text, i)
            close = -1 if found is None else text.find(C_CLOSE, found[2])
            while close >= 0 and ends[i] is None:
                after = skip_space(text, close + len(C_CLOSE))
                more = pairs_end(after)
                ends[i] = more if more is not None else (after if tail(text, after) else None)
                close = text.find(C_CLOSE, close + 1)
        return ends[i]

    end = pairs_end(first)
    if end is None:
        return None
    found = tail(text, end)
    assert found is not None
    return text[first:end], found[0], found[1]


def pairs_in(text: str) -> list[tuple[float, float, str]]:
    out, i = [], 0
    while i < len(text):
        found = header(text, i)
        close = -1 if found is None else text.find(C_CLOSE, found[2])
        if found is None or close < 0:
            i += 1
            continue
        out.append((found[0], found[1], text[found[2] : close].strip()))
        i = close + len(C_CLOSE)
    return out


def first_answer(text: str) -> str:
    start = text.find(A_OPEN)
    end = -1 if start < 0 else text.find(A_CLOSE, start + len(A_OPEN))
    return "" if end < 0 else text[start + len(A_OPEN) : end].strip()


@dataclass(frozen=True)
class Parsed:
    pairs: tuple[tuple[float, float, str], ...]
    thinking: str
    answer: str
    format_ok: bool


def oracle_parse(text: str, max_segments: int = 8) -> Parsed:
    found = template(text)
    if found is None:
        return Parsed((), "", first_answer(text), False)
    pairs = tuple(pairs_in(found[0]))
    thinking, answer = found[1].strip(), found[2].strip()
    ok = 0 < len(pairs) <= max_segments and thinking != "" and answer != ""
    for n, (start, end, caption) in enumerate(pairs):
        earliest = pairs[n - 1][1] if n else -1.0
        ok = ok and caption != "" and 0 <= start < end and start >= earliest
    return Parsed(pairs, thinking, answer, ok)


def oracle_letter(text: str) -> str:
    i = skip_space(text, 0)
    if i == len(text) or text[i] not in "ABCDEFGHabcdefgh":
        return ""
    if i + 1 < len(text) and text[i + 1] not in ".):" and not text[i + 1].isspace():
        return ""
    return text[i].upper()


def oracle_normalize(text: str) -> str:
    kept = "".join(c if c.isalnum() or c == "_" or c.isspace() else " " for c in text.casefold())
    return " ".join(kept.split())


def oracle_no_judge_score(text: str, truth: str) -> dict[str, float]:
    parsed = oracle_parse(text)
    assert not parsed.pairs
    letter = oracle_letter(parsed.answer)
    answer = 1.0 if letter != "" and letter == oracle_letter(truth) else 0.0
    fmt = 1.0 if parsed.format_ok else 0.0
    return {"score": fmt + answer, "format": fmt, "answer": answer, "consistency": 0.0, "completeness": 0.0,
            "intent": 0.0, "num_groundings": 0.0}


# --- the corpus ---------------------------------------------------------------------------

THINK = "<thinking>Let me think. The door opens at 3 s; wait, hmm, yes.</thinking>"
LETTER_FORMS = ["B", "b.", "B)", "(B)", "B: A door opens", "Bx", "b", " c ", "H. eight", "h)", "I", "J.", "E\nbecause",
                "B\n", "A door opens", "a door opens!", "Because.", "", "   ", "b:x", "B.A", "1"]


def pair(start: str, end: str, caption: str = "A door opens, a creak is heard.") -> str:
    return f"{T_OPEN}{start}-{end}{T_CLOSE}{C_OPEN}{caption}{C_CLOSE}"


def spans(n: int, rng: random.Random) -> list[tuple[str, str]]:
    out, t = [], rng.randint(0, 20) / 10
    for _ in range(n):
        start = t + rng.choice([0, 0, 0.3, 1.0])
        end = start + rng.randint(1, 40) / 10
        out.append((f"{start:.1f}", f"{end:.1f}"))
        t = end
    return out


def response(pairs: list[str], think: str = THINK, answer: str = "B", sep: str = "", before: str = "",
             after: str = "") -> str:
    return before + sep.join(pairs) + sep + think + sep + f"{A_OPEN}{answer}{A_CLOSE}" + after


def handmade() -> Iterator[tuple[str, str]]:
    rng = random.Random(3)
    for n in range(1, 10):
        for sep in ("", " ", "\n", "\t\n "):
            kind = "valid template" if n <= 8 else "too many pairs"
            yield kind, response([pair(s, e) for s, e in spans(n, rng)], sep=sep)
    ok = [pair("0.0", "1.5"), pair("2.0", "3.5")]
    yield "overlapping spans", response([pair("0.0", "2.5"), pair("2.0", "3.5")])
    yield "overlapping spans", response([pair("1.0", "4.0"), pair("0.5", "0.9")])
    yield "reversed span", response([pair("3.0", "1.0")])
    yield "reversed span", response([ok[0], pair("5.0", "4.9")])
    yield "equal span", response([pair("2.0", "2.0")])
    yield "equal span", response([ok[0], pair("3.0", "3.0")])
    yield "touching spans", response([pair("0.0", "1.5"), pair("1.5", "3.0")])
    for bad in ("-1.0", "-0.5"):
        yield "negative time", response([pair(bad, "2.0")])
        yield "negative time", response([ok[0], pair("2.0", bad)])
    for bad in ("1.25", "1.", "1", ".5", "01.50", "1,5", "1.0s", " 1.0"):
        yield "malformed time", response([pair(bad, "9.0")])
        yield "malformed time", response([pair("0.0", bad)])
    yield "leading zeros", response([pair("00.0", "001.5")])
    yield "other digit scripts", response([pair("\u0661.\u0665", "\u0663.\u0660")])  # Arabic-Indic 1.5 - 3.0
    for blank in ("", "  ", "\n"):
        yield "empty caption", response([pair("0.0", "1.0", blank)])
        yield "empty caption", response([ok[0], pair("2.0", "3.0", blank)])
        yield "empty thinking", response(ok, think=f"{TH_OPEN}{blank}{TH_CLOSE}")
        yield "empty answer", response(ok, answer=blank)
    for sep in (" ", "\n\n", "\t"):
        yield "whitespace between parts", response(ok, sep=sep)
        yield "whitespace between parts", sep + response(ok) + sep
        yield "whitespace inside a tag", response([f"{T_OPEN}{sep}0.0-1.0{T_CLOSE}{C_OPEN}x{C_CLOSE}"])
        yield "whitespace inside a tag", response([f"{T_OPEN}0.0-1.0{T_CLOSE}{sep}{C_OPEN}x{C_CLOSE}"])
        yield "whitespace inside a tag", response([f"{T_OPEN}0.0 -{sep}1.0{T_CLOSE}{C_OPEN}x{C_CLOSE}"])
    for text in ("Sure. ", "<think>hmm</think>", "x"):
        yield "text before", response(ok, before=text)
        yield "text after", response(ok, after=" " + text)
    yield "text after", response(ok, after=f" {A_CLOSE}")  # a stray closing tag at the very end
    yield "text after", response(ok, after=f" more {A_CLOSE}\n")
    full = response(ok)
    for tag in (TH_OPEN, TH_CLOSE, A_OPEN, A_CLOSE, C_OPEN, C_CLOSE, T_OPEN, T_CLOSE):
        yield "missing tag", full.replace(tag, "", 1)
        yield "missing tag", full.replace(tag, "")
    yield "missing tag", THINK + f"{A_OPEN}B{A_CLOSE}"  # no pairs at all
    yield "missing tag", f"{A_OPEN}B{A_CLOSE}"
    yield "missing tag", "The answer is B."
    yield "missing tag", ""
    yield "tags inside parts", response([pair("0.0", "1.0", "x"), "junk", pair("2.0", "3.0", "y")])
    yield "tags inside parts", response([pair("0.0", "1.0", f"x{C_CLOSE} y"), pair("2.0", "3.0")])
    yield "tags inside parts", response([pair("0.0", "1.0", f"see {pair('5.0', '6.0', 'inner')} then")])
    yield "tags inside parts", response([pair("0.0", "1.0", f"see {pair('0.5', '0.7', 'inner')} then")])
    yield "tags inside parts", response(ok, think=f"{TH_OPEN}a{TH_CLOSE} b {TH_CLOSE}")
    yield "tags inside parts", response(ok, think=f"{TH_OPEN}a {A_OPEN}C{A_CLOSE} b{TH_CLOSE}")
    yield "tags inside parts", response(ok, answer=f"B{A_CLOSE} or {A_OPEN}C")
    yield "tags inside parts", response(ok, answer=f"B{A_CLOSE}{A_CLOSE}")
    yield "tags inside parts", response([pair("0.0", "1.0", "x"), pair("0.5", "2.0", "y")], sep=" junk ")
    yield "tags inside parts", response([pair("0.0", "1.0", "x"), "<time>bad</time>", pair("2.0", "3.0", "y")])
    yield "tags inside parts", pair("0.0", "1.0") + THINK + f"{A_OPEN}B{A_CLOSE}" + pair("2.0", "3.0") + THINK + \
        f"{A_OPEN}C{A_CLOSE}"
    yield "two answers", f"{A_OPEN}C{A_CLOSE} then {A_OPEN}B{A_CLOSE}"
    yield "two answers", f"{THINK}{A_OPEN} b) {A_CLOSE}{A_OPEN}D{A_CLOSE}"
    yield "unclosed answer", f"{THINK}{A_OPEN}B"
    for form in LETTER_FORMS:
        yield "letter forms, template", response(ok, answer=form)
        yield "letter forms, no pairs", f"{THINK}{A_OPEN}{form}{A_CLOSE}"
        yield "letter forms, no tags", form


def mutated(rng: random.Random) -> str:
    """A random response near the template: pairs, times, captions, order, tags, wrapping."""
    parts = []
    for start, end in spans(rng.randint(1, 9), rng):
        roll = rng.random()
        if roll < 0.06:
            start, end = end, start
        elif roll < 0.10:
            end = start
        elif roll < 0.14:
            start = "-" + start
        elif roll < 0.18:
            end += rng.choice(["5", "0", ""])
        caption = rng.choice(["A dog barks.", "", " ", "x</caption>y", "two\nlines", "\u00e9t\u00e9"])
        parts.append(pair(start, end, caption))
    if rng.random() < 0.15:
        parts.insert(rng.randrange(len(parts)), rng.choice(["junk", " ", "<time>1.0-2.0</time>"]))
    think = rng.choice([THINK, f"{TH_OPEN} {TH_CLOSE}", f"{TH_OPEN}x{TH_CLOSE}y{TH_CLOSE}", ""])
    text = response(parts, think=think, answer=rng.choice(LETTER_FORMS), sep=rng.choice(["", " ", "\n"]),
                    before=rng.choice(["", "", " \n", "Hi "]), after=rng.choice(["", "", "\n", " ok"]))
    if rng.random() < 0.15:
        tag = rng.choice([TH_OPEN, TH_CLOSE, A_OPEN, A_CLOSE, C_CLOSE, T_CLOSE])
        text = text.replace(tag, "", 1)
    return text


def corpus() -> list[tuple[str, str]]:
    cases = list(handmade())
    rng = random.Random(20260821)
    cases += [("random", mutated(rng)) for _ in range(300)]
    return cases


CORPUS = corpus()
KINDS = {
    "valid template", "too many pairs", "overlapping spans", "reversed span", "equal span", "touching spans",
    "negative time", "malformed time", "leading zeros", "other digit scripts", "empty caption", "empty thinking",
    "empty answer", "whitespace between parts", "whitespace inside a tag", "text before", "text after",
    "missing tag", "tags inside parts", "two answers", "unclosed answer", "letter forms, template",
    "letter forms, no pairs", "letter forms, no tags", "random",
}
MC_TRUTHS = ["B. A door opens", "B", "(B)", "b", "H"]
OPEN_TRUTHS = ["A door opens", "Because."]


# --- the tests ----------------------------------------------------------------------------


def test_the_corpus_covers_every_class() -> None:
    assert len({text for _, text in CORPUS}) >= 400
    assert {kind for kind, _ in CORPUS} == KINDS
    parsed = [oracle_parse(text) for _, text in CORPUS]
    outcomes = Counter(
        ("format" if p.format_ok else "no format", "pairs" if p.pairs else "no pairs") for p in parsed
    )
    # Every combination but "format without pairs" (impossible) occurs, each more than once.
    assert set(outcomes) == {("format", "pairs"), ("no format", "pairs"), ("no format", "no pairs")}
    assert min(outcomes.values()) > 10, outcomes
    letters = Counter(oracle_letter(p.answer) for p in parsed)
    assert {"B", "C", "H", ""} <= set(letters), letters


@pytest.mark.parametrize("max_segments", [8, 3])
def test_parsing_agrees_with_the_reference(max_segments: int) -> None:
    disagreements = []
    for kind, text in CORPUS:
        ours = qi.parse_qi_response(text, max_segments)
        expected = oracle_parse(text, max_segments)
        got = Parsed(tuple((g.start, g.end, g.caption) for g in ours.groundings), ours.thinking, ours.answer,
                     ours.format_ok)
        if got != expected:
            disagreements.append((kind, text, got, expected))
    assert not disagreements, disagreements[:3]


def test_letters_and_normalized_text_agree_with_the_reference() -> None:
    texts = {oracle_parse(text).answer for _, text in CORPUS} | set(LETTER_FORMS) | set(MC_TRUTHS + OPEN_TRUTHS)
    texts |= {"Ünïcödé — text_with_underscores!", "ß and ſ", "x\u00a0y\u2003z", "\u0661\u0662 \u00bd", "K\u212a"}
    assert [qi.choice_letter(t) for t in sorted(texts)] == [oracle_letter(t) for t in sorted(texts)]
    assert [qi.normalize_answer(t) for t in sorted(texts)] == [oracle_normalize(t) for t in sorted(texts)]


def test_scores_agree_where_no_judge_is_needed_and_the_rest_raises() -> None:
    scored, raised = 0, 0
    for kind, text in CORPUS:
        pairs = oracle_parse(text).pairs
        for truth, multiple_choice in [(t, True) for t in MC_TRUTHS] + [(t, False) for t in OPEN_TRUTHS]:
            extra_info = {"is_multiple_choice": multiple_choice}
            if multiple_choice and not pairs:
                result = compute_score("omnivideo_r1_qi", text, truth, extra_info)
                assert result == oracle_no_judge_score(text, truth), (kind, text, truth)
                scored += 1
            else:
                with pytest.raises(JudgeRequiredError, match="needs the intent judge"):
                    compute_score("omnivideo_r1_qi", text, truth, extra_info)
                raised += 1
    assert scored > 400 and raised > 1000


def test_rule_parts_agree_where_a_judge_is_needed() -> None:
    """The numbers :func:`compose_qi_score` adds the judge's to: format, answer, pairs."""
    for _, text in CORPUS:
        expected = oracle_parse(text)
        for truth in MC_TRUTHS:
            parts = qi.rule_parts(text, truth, multiple_choice=True)
            letter = oracle_letter(expected.answer)
            assert parts.answer == float(letter != "" and letter == oracle_letter(truth))
            assert (parts.format, parts.num_groundings) == (float(expected.format_ok), len(expected.pairs))
        for truth in OPEN_TRUTHS:
            parts = qi.rule_parts(text, truth, multiple_choice=False)
            matches = oracle_normalize(expected.answer) == oracle_normalize(truth)
            assert parts.answer == (1.0 if matches else None)


# --- worked examples ----------------------------------------------------------------------


def test_a_multiple_choice_answer_without_pairs_scores_its_letter() -> None:
    # No pairs, so no format reward (0) and no judge; "b." is letter B: 0 + 1.
    result = compute_score("omnivideo_r1_qi", THINK + "<answer>b. a door</answer>", "B. A door opens",
                           {"is_multiple_choice": True})
    assert result == {"score": 1.0, "format": 0.0, "answer": 1.0, "consistency": 0.0, "completeness": 0.0,
                      "intent": 0.0, "num_groundings": 0.0}
    missing = compute_score("omnivideo_r1_qi", "no tags", "B", {"is_multiple_choice": True})
    assert missing["score"] == 0.0
    with pytest.raises(JudgeRequiredError, match=r"open-ended .*omnivideo_qi_judge"):  # no extra_info: open
        compute_score("omnivideo_r1_qi", "<answer>B</answer>", "B")


def test_the_judge_error_is_a_reward_error_naming_the_pairs() -> None:
    text = response([pair("0.0", "1.0"), pair("1.0", "2.0")])
    with pytest.raises(RewardError, match=r"has 2 <time>/<caption> pair\(s\).*omnivideo_qi_judge"):
        compute_score("omnivideo_r1_qi", text, "B", {"is_multiple_choice": True})


def test_max_segments_is_a_scorer_keyword() -> None:
    text = response([pair(s, e) for s, e in [("0.0", "1.0"), ("1.0", "2.0"), ("2.0", "3.0")]])
    assert qi.rule_parts(text, "B", multiple_choice=True).format == 1.0
    assert qi.rule_parts(text, "B", multiple_choice=True, max_segments=2).format == 0.0


def test_compose_adds_the_judge_numbers_as_eq_8() -> None:
    text = response([pair("0.0", "1.0"), pair("1.0", "2.0")], answer="B)")
    parts = qi.rule_parts(text, "B. A door opens", multiple_choice=True)
    assert (parts.format, parts.answer, parts.num_groundings, parts.needs_judge) == (1.0, 1.0, 2, True)
    # consistency (0.5 + 1.0) / 2 = 0.75; intent 0.5 * (0.75 + 0.4) = 0.575; 1 + 1 + 0.575.
    result = qi.compose_qi_score(parts, consistency=[0.5, 1.0], completeness=0.4)
    assert result == pytest.approx({"score": 2.575, "format": 1.0, "answer": 1.0, "consistency": 0.75,
                                    "completeness": 0.4, "intent": 0.575, "num_groundings": 2.0})
    open_parts = qi.rule_parts(text, "The door opens", multiple_choice=False)
    assert open_parts.answer is None
    # format 1 + judge answer 0.6 + 0.5 * (0.75 + 0.0) = 1.975
    assert qi.compose_qi_score(open_parts, consistency=[1.0, 0.5], open_answer=0.6)["score"] == pytest.approx(1.975)
    exact = qi.rule_parts(response([pair("0.0", "1.0")], answer="the door, opens!"), "The door opens",
                          multiple_choice=False)
    assert exact.answer == 1.0 and exact.needs_judge  # verl-omni still wants its judge for the pair


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"consistency": [1.0]}, "one score per grounding pair: 2, got 1"),
        ({"consistency": [1.0, 1.5]}, r"consistency\[1\] must be a finite number in \[0, 1\]"),
        ({"consistency": [1.0, float("nan")]}, r"consistency\[1\] must be a finite number"),
        ({"consistency": [1.0, 1.0], "completeness": -0.1}, "completeness must be"),
        ({"consistency": [1.0, 1.0], "open_answer": 0.5}, "open_answer is only for an open answer"),
    ],
)
def test_compose_refuses_wrong_judge_numbers(kwargs: dict[str, object], message: str) -> None:
    parts = qi.rule_parts(response([pair("0.0", "1.0"), pair("1.0", "2.0")]), "B", multiple_choice=True)
    with pytest.raises(ValueError, match=message):
        qi.compose_qi_score(parts, **kwargs)  # type: ignore[arg-type]


def test_compose_needs_the_open_answer_and_no_completeness_without_pairs() -> None:
    parts = qi.rule_parts("<answer>maybe</answer>", "The door opens", multiple_choice=False)
    with pytest.raises(ValueError, match="open_answer is needed"):
        qi.compose_qi_score(parts)
    with pytest.raises(ValueError, match="completeness is 0 for a response without grounding pairs"):
        qi.compose_qi_score(parts, completeness=0.5, open_answer=1.0)
    assert qi.compose_qi_score(parts, open_answer=0.25)["score"] == 0.25
