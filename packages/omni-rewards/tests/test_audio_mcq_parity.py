"""Differential test: our AudioMCQ scorer against a TEST ORACLE of verl-omni's
``verl_omni/utils/reward_score/audio_mcq.py``, written here from its facts and independently
of ``omni_rewards.scorers.audio_mcq`` (character scanning instead of regular expressions, no
shared helper), on a generated corpus. Every case must agree on every output field.

The facts:

- Normalisation: NFKC; whitespace runs (``str.isspace``) become one space; characters of
  `` \\t\\r\\n"'`“”‘’.,;:!?！？。，；：`` are stripped from both ends; case-folded.
- Ground truth, text: the answer, its own only choice (index 0); ours pays the text only
  (a deliberate difference: the letter ``a`` would be right for any question). Mapping: ``answer`` and
  ``choices`` as text; the correct indices are the choices whose normalisation equals the
  answer's (none: rejected); ``correct_choice_indices`` present must be that set, else
  ``correct_choice_index`` present must be in it (else rejected).

The oracle is handed each ground truth as verl-omni's dataset hands it (a mapping); our
scorer also gets it as JSON text in some cases, which it reads as the mapping (a documented
difference; the reference would take the text for a plain answer).
- Response: the contents of every ``<answer>`` … ``</answer>`` pair, tag names matched
  case-insensitively as Python's ``re`` does (``ſ`` is an ``s``), whitespace before ``>``
  allowed, the nearest closing tag after each opening, scanning on after it. None: all 0.
  ``format_valid``: one pair, non-empty after normalisation. Correct: every normalised
  content equal, the last non-empty, and equal to the normalised answer or to ``x``, ``x)``
  or ``(x)`` for the letter ``x = chr(ord("a") + i)`` of a correct index ``i``.
"""

from __future__ import annotations

import json
import random
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from omni_rewards import SCORERS, compute_score
from omni_rewards.errors import RewardError
from omni_rewards.scorers.audio_mcq import ALIAS, DATA_SOURCE, AudioMCQGroundTruthError

# --- the oracle ----------------------------------------------------------------------------

_STRIPPED = frozenset([" ", "\t", "\r", "\n", '"', "'", "`", "\u201c", "\u201d", "\u2018", "\u2019",
                       ".", ",", ";", ":", "!", "?", "\uff01", "\uff1f", "\u3002", "\uff0c", "\uff1b", "\uff1a"])
_TAG_NAME = "answer"


class OracleRejects(Exception):
    """The reference raises on this ground truth."""


def oracle_normalize(value: str) -> str:
    text = unicodedata.normalize("NFKC", value)
    words: list[str] = []
    current = ""
    for char in text:
        if char.isspace():
            if current:
                words.append(current)
            current = ""
        else:
            current += char
    if current:
        words.append(current)
    joined = " ".join(words)
    start, end = 0, len(joined)
    while start < end and joined[start] in _STRIPPED:
        start += 1
    while end > start and joined[end - 1] in _STRIPPED:
        end -= 1
    return joined[start:end].casefold()


def _tag_end(text: str, at: int, closing: bool) -> int:
    """Where a tag starting at ``at`` ends (index after ``>``), or -1 when there is none."""
    prefix = "</" if closing else "<"
    if not text.startswith(prefix, at):
        return -1
    i = at + len(prefix)
    for letter in _TAG_NAME:
        if i >= len(text) or text[i].casefold() != letter:
            return -1
        i += 1
    while i < len(text) and text[i].isspace():
        i += 1
    return i + 1 if i < len(text) and text[i] == ">" else -1


def oracle_tag_contents(text: str) -> list[str]:
    contents: list[str] = []
    position = 0
    while True:
        opening_end = -1
        while position < len(text):
            opening_end = _tag_end(text, position, closing=False)
            if opening_end >= 0:
                break
            position += 1
        if opening_end < 0:
            return contents
        scan = opening_end
        while scan < len(text) and _tag_end(text, scan, closing=True) < 0:
            scan += 1
        if scan >= len(text):
            return contents
        contents.append(text[opening_end:scan])
        position = _tag_end(text, scan, closing=True)


def oracle_truth(ground_truth: Any, letters_for_text: bool = True) -> tuple[str, list[int]]:
    """(normalised answer, correct indices) as the reference reads them; ``letters_for_text``
    false: our deliberate difference, a text answer has no choice letters."""
    if isinstance(ground_truth, str):
        return oracle_normalize(ground_truth), [0] if letters_for_text else []
    answer = oracle_normalize(str(ground_truth["answer"]))
    normalized_choices = [oracle_normalize(str(choice)) for choice in ground_truth["choices"]]
    correct = [index for index in range(len(normalized_choices)) if normalized_choices[index] == answer]
    if len(correct) == 0:
        raise OracleRejects("answer absent")
    if "correct_choice_indices" in ground_truth:
        if sorted(set(int(i) for i in ground_truth["correct_choice_indices"])) != correct:
            raise OracleRejects("indices disagree")
    elif "correct_choice_index" in ground_truth:
        if int(ground_truth["correct_choice_index"]) not in correct:
            raise OracleRejects("index disagrees")
    return answer, correct


def oracle_score(solution: str, ground_truth: Any, letters_for_text: bool = True) -> dict[str, float]:
    answer, correct = oracle_truth(ground_truth, letters_for_text)
    contents = [oracle_normalize(content) for content in oracle_tag_contents(solution)]
    if not contents:
        return {"score": 0.0, "content_correct": 0.0, "format_valid": 0.0}
    last = contents[-1]
    format_valid = 1.0 if (len(contents) == 1 and last != "") else 0.0
    if last == "" or any(content != last for content in contents):
        return {"score": 0.0, "content_correct": 0.0, "format_valid": format_valid}
    named = False
    for index in correct:
        letter = chr(97 + index)
        named = named or last in (letter, letter + ")", "(" + letter + ")")
    hit = 1.0 if (last == answer or named) else 0.0
    return {"score": hit, "content_correct": hit, "format_valid": format_valid}


# --- the corpus ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    choices: tuple[str, ...]
    answer: int


QUESTIONS = [
    Question(("a dog barking", "a car horn", "rain on a roof", "a piano"), 1),
    Question(("Violin", "Cello"), 0),
    Question(("yes", "no", "maybe"), 2),
    Question(("Straße", "Road", "Path", "Lane", "Track"), 0),  # ß case-folds to ss
    Question(("“Quoted”", "plain", "it's"), 0),
    Question(("Ｆｕｌｌ ｗｉｄｔｈ", "half width"), 1),
    Question(("3 dB", "30 dB", "300 dB", "0.3 dB"), 3),
    Question(tuple(f"option {n}" for n in range(26)), 25),  # the last letter, z
]

GroundTruthForm = Callable[[Question], tuple[Any, Any]]
"""A question's ground truth as our scorer gets it, and as the reference gets it."""


def _dict(question: Question, array: Callable[[list[Any]], Any] = list, **fields: Any) -> dict[str, Any]:
    truth = {
        "answer": question.choices[question.answer],
        "choices": array(list(question.choices)),
        "correct_choice_index": question.answer,
        "correct_choice_indices": array([question.answer]),
    }
    truth.update(fields)
    return truth


def _both(truth: Any) -> tuple[Any, Any]:
    return truth, truth


def _only_index(question: Question) -> dict[str, Any]:
    """The choices as the tuple they are, and no ``correct_choice_indices`` key."""
    return {"answer": question.choices[question.answer], "choices": question.choices,
            "correct_choice_index": question.answer}


GROUND_TRUTH_FORMS: dict[str, GroundTruthForm] = {
    "dict of lists": lambda q: _both(_dict(q)),
    "dict of tuples": lambda q: _both(_dict(q, tuple)),
    "dict of numpy arrays": lambda q: _both(_dict(q, np.array)),
    "numpy int64 indices": lambda q: _both(_dict(q, np.array, correct_choice_index=np.int64(q.answer))),
    "JSON text": lambda q: (json.dumps(_dict(q)), _dict(q)),
    "no index fields": lambda q: _both({"answer": q.choices[q.answer], "choices": list(q.choices)}),
    "index only": lambda q: _both(_only_index(q)),
    "plain string": lambda q: _both(q.choices[q.answer]),
}


@dataclass(frozen=True)
class Case:
    kind: str
    solution: str
    truth: Any
    reference_truth: Any
    truth_form: str


def letter(index: int) -> str:
    return chr(ord("A") + index)


def tagged(content: str) -> str:
    return f"<think>Listening to the clip... let me think.</think><answer>{content}</answer>"


def response_classes(question: Question) -> Iterator[tuple[str, str]]:
    """(class, response) for one question."""
    right, up = question.choices[question.answer], letter(question.answer)
    wrong_index = (question.answer + 1) % len(question.choices)
    wrong, wrong_up = question.choices[wrong_index], letter(wrong_index)
    yield from (("correct text", tagged(text)) for text in (right, f" {right} ", f"\n{right}\n"))
    for form in (up, up.lower(), f"({up})", f"({up.lower()})", f"{up})", f"{up.lower()})", f"{up}.", f" ( {up} ) "):
        yield "correct label forms", tagged(form)
    for form in (right.upper(), right.lower(), right.swapcase(), right.replace(" ", "  \t "), f"\u00a0{right}\u3000"):
        yield "case and whitespace", tagged(form)
    full_width = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in right)
    full_width_label = chr(ord("Ａ") + question.answer)
    for form in (full_width, f"（{up}）", full_width_label, f"{right}！", "Ⓐ", f"{up}：", "ﬁ" + right):
        yield "NFKC forms", tagged(form)
    for form in (f'"{right}"', f"“{right}”", f"‘{up}’", f"`{right}`", f"{right}.", f"...{right}!?",
                 f"{right}。", f"'{up}'.", f"({right})", f"*{right}*", f"-{up}", f"{right};:,"):
        yield "surrounding punctuation", tagged(form)
    yield "several tags agreeing", f"<answer>{up}</answer> so <answer>{up}</answer>"
    yield "several tags agreeing", f"<answer>{right}</answer><answer> {right.upper()}. </answer>"
    yield "several tags agreeing", f"<answer>{up}</answer><answer>({up.lower()})</answer>"  # equal meaning, not text
    yield "several tags agreeing", f"<ANSWER>{right}.</ANSWER>\n<answer>“{right}”</answer><answer>{right}</answer>"
    yield "several tags conflicting", f"<answer>{wrong_up}</answer> no wait <answer>{up}</answer>"
    yield "several tags conflicting", f"<answer>{right}</answer><answer>{up}</answer>"
    yield "several tags conflicting", f"<answer>{up}</answer><answer>{wrong_up}</answer>"
    for form in ("<answer></answer>", "<answer>   </answer>", "<answer> .!? </answer>", "<answer>“”</answer>",
                 f"<answer></answer><answer>{up}</answer>", f"<answer>{up}</answer><answer></answer>",
                 "<answer></answer><answer> </answer>"):
        yield "empty tags", form
    for form in (right, up, f"The answer is {up}.", f"answer: {right}", "", f"<think>{up}</think>"):
        yield "no tags", form
    for form in (f"<answer >{up}</answer>", f"<answer\n>{up}</answer\t>", f"<answer\u3000>{right}</answer >",
                 f"< answer>{up}</answer>", f'<answer id="1">{up}</answer>', f"<answer>{up}</ answer>",
                 f"<answer>{up}</answer x>", f"<answer/>{up}</answer>"):
        yield "tags with attributes or spaces", form
    for form in (f"<ANSWER>{up}</ANSWER>", f"<Answer>{right}</aNsWeR>", f"<ANSWER >{up}</answer>",
                 f"<anſwer>{up}</ANſWER>", f"<АNSWER>{up}</ANSWER>"):  # the last opens with a Cyrillic А
        yield "upper-case tags", form
    for form in (f"<answer><answer>{up}</answer></answer>", f"<answer>{up}", f"{up}</answer>",
                 f"<answer>{wrong_up} <answer>{up}</answer>", f"</answer>{up}<answer>",
                 f"<answer>{up}</answer><answer>{wrong_up}", f"<answer>{up}</answer></answer>",
                 f"<answer>{up}<answer></answer>", f"<answer>\n<answer>{right}</answer>"):
        yield "nested or unclosed tags", form
    for form in (wrong, wrong_up, f"({wrong_up.lower()})", f"{wrong_up})", wrong.upper()):
        yield "wrong option", tagged(form)
    for form in (f"{right} {right}", f"not {right}", f"{right}?", f"{right}\u200b", f"{up}{up}", f"(({up}))",
                 f"{up}))", f"({up}", f"[{up}]", f"{up}) {right}", f"option {up}", f"{up}. {right}",
                 right.replace("o", "о"), f"{up.lower()}.)", f"{up} or {wrong_up}"):
        yield "answer-equivalent adversarial texts", tagged(form)


def corpus() -> list[Case]:
    cases = []
    forms = list(GROUND_TRUTH_FORMS.items())
    rotation = 0
    for question in QUESTIONS:
        for kind, solution in response_classes(question):
            name, make_truth = forms[rotation % len(forms)]
            rotation += 1
            cases.append(Case(kind, solution, *make_truth(question), name))
    # Several choices equal to the answer under normalisation: every one of their letters is right.
    twins = {"answer": "Dog", "choices": ["Dog", "cat", "dog."], "correct_choice_indices": np.array([0, 2])}
    by_index = {"answer": "dog.", "choices": ["Dog", "cat", "dog."], "correct_choice_index": 2}
    for form in ("A", "(c)", "C)", "b", "DOG", "d", "dog!", "Cat"):
        cases.append(Case("answer-equivalent choices", tagged(form), *_both(twins), "dict of numpy arrays"))
        cases.append(Case("answer-equivalent choices", tagged(form), *_both(by_index), "index only"))
    return cases + random_cases(120)


def random_cases(count: int) -> list[Case]:
    """Random questions, answers and wrappers, for combinations the classes above miss."""
    rng = random.Random(20240611)
    words = ["Dog", "cat", "the rain", "A", "b", "Ｃ", "it's", "yes.", "no!", "1", "x y", "Ωmega", "ﬁne"]
    forms = list(GROUND_TRUTH_FORMS.items())
    cases = []
    for _ in range(count):
        choices = tuple(rng.sample(words, rng.randint(2, 6)))
        question = Question(choices, rng.randrange(len(choices)))
        pick = rng.randrange(len(choices))
        content = rng.choice([choices[pick], letter(pick), f"({letter(pick).lower()})", f" {choices[pick]}. ", ""])
        wrapper = rng.choice(["<answer>{}</answer>", "<ANSWER >{}</answer>", "{}", "<answer>{}",
                              "<answer>{0}</answer><answer>{0}</answer>", "<answer>B</answer><answer>{}</answer>"])
        name, make_truth = rng.choice(forms)
        cases.append(Case("random", wrapper.format(content), *make_truth(question), name))
    return cases


CORPUS = corpus()
FIELDS = ("score", "content_correct", "format_valid")
CLASSES = {
    "correct text", "correct label forms", "case and whitespace", "NFKC forms", "surrounding punctuation",
    "several tags agreeing", "several tags conflicting", "empty tags", "no tags", "tags with attributes or spaces",
    "upper-case tags", "nested or unclosed tags", "wrong option", "answer-equivalent adversarial texts",
    "answer-equivalent choices", "random",
}


def test_corpus_covers_every_class_and_ground_truth_form() -> None:
    kinds = Counter(case.kind for case in CORPUS)
    forms = Counter(case.truth_form for case in CORPUS)
    assert len(CORPUS) >= 400, len(CORPUS)
    assert set(kinds) == CLASSES
    assert min(kinds.values()) >= 10, kinds
    assert set(forms) == set(GROUND_TRUTH_FORMS)
    assert min(forms.values()) >= 20, forms


def test_agrees_with_the_reference_on_every_case() -> None:
    disagreements = []
    outcomes: Counter[tuple[float, float]] = Counter()
    for case in CORPUS:
        # The one difference in scoring: a plain text answer pays its text only (no letter "a").
        reference = oracle_score(case.solution, case.reference_truth, letters_for_text=case.truth_form != "plain string")
        mine = compute_score(DATA_SOURCE, case.solution, case.truth)
        if {field: mine[field] for field in FIELDS} != reference or set(mine) != set(FIELDS):
            disagreements.append((case, mine, reference))
        assert all(type(value) is float for value in mine.values()), mine
        outcomes[(reference["score"], reference["format_valid"])] += 1
    report = "\n".join(f"{c.kind} [{c.truth_form}]: {c.solution!r} vs {c.truth!r}: ours={m} ref={r}"
                       for c, m, r in disagreements[:20])
    assert not disagreements, f"{len(disagreements)} of {len(CORPUS)} disagree:\n{report}"
    # Every combination of the two outputs is reached: correct with and without a valid format
    # (agreeing tags), wrong with and without.
    assert set(outcomes) == {(0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0)}, outcomes
    assert min(outcomes.values()) >= 20, outcomes


def test_the_alias_is_the_same_scorer() -> None:
    assert SCORERS.get(ALIAS) is SCORERS.get(DATA_SOURCE)
    truth = _dict(QUESTIONS[0])
    assert compute_score(ALIAS, "<answer>(b)</answer>", truth) == {
        "score": 1.0, "content_correct": 1.0, "format_valid": 1.0
    }


def test_a_plain_string_ground_truth_pays_its_text_not_the_letter_a() -> None:
    # verl-omni makes the text its own only choice, "a": "A" would be right for any question.
    assert oracle_score("<answer>A</answer>", "a piano")["score"] == 1.0
    assert compute_score(DATA_SOURCE, "<answer>A</answer>", "a piano")["score"] == 0.0
    assert compute_score(DATA_SOURCE, "<answer>A piano.</answer>", "a piano")["score"] == 1.0
    assert compute_score(DATA_SOURCE, "<answer>A</answer>", "A")["score"] == 1.0  # the text itself


# --- ground truths that cannot be scored against -------------------------------------------

QUESTION = QUESTIONS[0]  # choices: dog barking, car horn, rain on a roof, piano; answer B
REJECTED_BY_BOTH: dict[str, Any] = {
    "answer not among the choices": _dict(QUESTION, answer="a trumpet"),
    "answer of an empty choice list": _dict(QUESTION, choices=[], correct_choice_indices=[]),
    "indices name another choice": _dict(QUESTION, correct_choice_indices=[0]),
    "indices name one choice too many": _dict(QUESTION, correct_choice_indices=np.array([1, 2])),
    "indices empty": _dict(QUESTION, correct_choice_indices=[]),
    "indices out of range": _dict(QUESTION, correct_choice_indices=[1, 9]),
    "index names another choice": {**_only_index(QUESTION), "correct_choice_index": 3},
    "index out of range": {"answer": "a car horn", "choices": list(QUESTION.choices), "correct_choice_index": -1},
}
REJECTED_BY_US: dict[str, Any] = {  # the reference fails with a KeyError/TypeError, or reads chars
    "no answer": {"choices": list(QUESTION.choices)},
    "no choices": {"answer": "a car horn"},
    "choices as one string": {"answer": "a", "choices": "abc"},
    "index not an integer": _dict(QUESTION, correct_choice_index="second", correct_choice_indices=None),
    "indices not a list": _dict(QUESTION, correct_choice_indices=1),
    "a number": 5,
    "None": None,
    "a list": ["a car horn"],
}


@pytest.mark.parametrize("name", sorted(REJECTED_BY_BOTH))
def test_a_ground_truth_the_reference_rejects_raises_our_error(name: str) -> None:
    truth = REJECTED_BY_BOTH[name]
    with pytest.raises(OracleRejects):
        oracle_score("<answer>B</answer>", truth)
    for given in (truth, json.dumps(truth, default=lambda array: array.tolist())):
        with pytest.raises(AudioMCQGroundTruthError, match="Fix reward_model.ground_truth in the dataset"):
            compute_score(DATA_SOURCE, "<answer>B</answer>", given)


@pytest.mark.parametrize("name", sorted(REJECTED_BY_US))
def test_a_malformed_ground_truth_raises_our_error(name: str) -> None:
    with pytest.raises(AudioMCQGroundTruthError) as caught:
        compute_score(DATA_SOURCE, "<answer>B</answer>", REJECTED_BY_US[name])
    assert isinstance(caught.value, RewardError)
    assert "AudioMCQ ground truth" in str(caught.value)


def test_the_error_says_what_disagrees() -> None:
    with pytest.raises(AudioMCQGroundTruthError, match=r"correct_choice_indices \[0\] disagree .* \[1\]"):
        compute_score(DATA_SOURCE, "x", REJECTED_BY_BOTH["indices name another choice"])
    with pytest.raises(AudioMCQGroundTruthError, match="the answer 'a trumpet' is not among the choices"):
        compute_score(DATA_SOURCE, "x", REJECTED_BY_BOTH["answer not among the choices"])


def test_the_ground_truth_is_checked_before_the_response() -> None:
    # As in the reference: no tags does not hide a bad row.
    with pytest.raises(AudioMCQGroundTruthError):
        compute_score(DATA_SOURCE, "no answer here", REJECTED_BY_BOTH["answer not among the choices"])


# --- the deliberate differences (each documented in the scorer's docstring) ---------------


def test_an_index_that_disagrees_beside_agreeing_indices_is_rejected() -> None:
    truth = _dict(QUESTION, correct_choice_index=0, correct_choice_indices=[1])
    assert oracle_score("<answer>B</answer>", truth)["score"] == 1.0  # the reference ignores the index
    with pytest.raises(AudioMCQGroundTruthError, match="correct_choice_index 0 is not a choice equal"):
        compute_score(DATA_SOURCE, "<answer>B</answer>", truth)


def test_null_index_fields_are_read_as_absent() -> None:
    # A parquet struct has every key in every row: a key some rows lack reads back as null.
    # The reference iterates or int()s the None and fails.
    truth = _dict(QUESTION, correct_choice_index=None, correct_choice_indices=None)
    assert compute_score(DATA_SOURCE, "<answer>(B)</answer>", truth)["score"] == 1.0
    truth = _dict(QUESTION, correct_choice_indices=None)
    assert compute_score(DATA_SOURCE, "<answer>a car horn</answer>", truth)["score"] == 1.0
    with pytest.raises(AudioMCQGroundTruthError):
        compute_score(DATA_SOURCE, "<answer>B</answer>", {**truth, "correct_choice_index": 0})


def test_json_text_of_the_object_is_read_as_the_object() -> None:
    # The reference would compare responses with the JSON text itself, so nothing could score.
    text = json.dumps(_dict(QUESTION))
    assert compute_score(DATA_SOURCE, "<answer>a car horn</answer>", text)["score"] == 1.0
    assert compute_score(DATA_SOURCE, "<answer>A</answer>", text)["score"] == 0.0
    # Text that only looks like JSON stays a plain answer.
    assert compute_score(DATA_SOURCE, "<answer>{not json</answer>", "{not json")["score"] == 1.0
