"""OmniVideo-R1 QI (``omnivideo_r1_qi``): the rule part of the query-intensive grounding
reward, as verl-omni 6feb242a's ``verl_omni/utils/reward_score/omnivideo_qi.py`` computes it
(its OmniVideo-R1 QI pull request), Eq. (8) of the paper::

    R_QI = r_format + r_answer + 0.5 * (r_consistency + r_completeness)

The response template (the system prompt of ``omni_data.convert.omnivideo_qi``)::

    <time>1.0-2.5</time><caption>...</caption> ... <thinking>...</thinking><answer>...</answer>

- :func:`parse_qi_response`: the whole response must be one or more time/caption pairs,
  then thinking, then answer (whitespace allowed around and between the parts, none inside
  a ``<time>`` tag; times are digits with exactly one decimal). ``r_format`` is 1 when it
  is, the pairs are at most ``max_segments`` (8) and in order without overlap (touching is
  fine), every span is longer than zero and every caption, the thinking and the answer are
  non-empty. A response that is not in the template has no pairs and its answer is the
  first ``<answer>`` payload.
- ``r_answer``: multiple choice (``extra_info.is_multiple_choice``): the option letter A-H
  that starts the answer and the ground truth (:func:`choice_letter`) are equal. An open
  answer is 1 when it equals the ground truth after :func:`normalize_answer`, else the
  judge scores it.
- ``r_consistency`` (per pair, averaged) and ``r_completeness`` come from a judge model.

:func:`score_omnivideo_qi` returns the score where verl-omni asks no judge: a
multiple-choice row whose response has no pairs (then ``score = r_format + r_answer``, and
``r_format`` is 0). Everywhere else it raises :class:`~omni_rewards.errors.JudgeRequiredError`
(the reward manager counts it as a failed sample). verl-omni too needs its judge there,
even for an open answer that matches exactly. The whole reward, judge included, is
:func:`omni_rewards.scorers.omnivideo_qi_judge.compute_score`. :func:`compose_qi_score` adds given judge
numbers to the rule parts, as verl-omni does.

Differences from verl-omni: ``max_segments`` is a scorer keyword (verl-omni reads
``OMNIVIDEO_QI_MAX_SEGMENTS``); the result holds numbers only (no ``answer_reason`` /
``completeness_reason`` texts, no ``decode_failures``, which only the judge path sets).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omni_rewards.errors import JudgeRequiredError
from omni_rewards.registry import SCORERS
from omni_rewards.text import first_answer_payload

DATA_SOURCE = "omnivideo_r1_qi"
MAX_SEGMENTS = 8
"""verl-omni's default cap on time/caption pairs in a well-formed response."""

_TIMES = r"<time>(\d+\.\d)-(\d+\.\d)</time>"
_PAIR = re.compile(_TIMES + r"<caption>(.*?)</caption>", re.DOTALL)
_TEMPLATE = re.compile(
    r"\s*(?P<pairs>(?:" + _TIMES + r"<caption>.*?</caption>\s*)+)"
    r"<thinking>(?P<thinking>.*?)</thinking>\s*<answer>(?P<answer>.*?)</answer>\s*",
    re.DOTALL,
)
_LEADING_LETTER = re.compile(r"\s*([A-H])(?:[.):\s]|$)", re.IGNORECASE)
_NOT_WORD_OR_SPACE = re.compile(r"[^\w\s]")


@dataclass(frozen=True)
class Grounding:
    """One ``<time>start-end</time><caption>...</caption>`` pair (seconds; caption stripped)."""

    start: float
    end: float
    caption: str


@dataclass(frozen=True)
class QIResponse:
    """A response read against the template; ``groundings`` is empty when it is not in it."""

    groundings: tuple[Grounding, ...]
    thinking: str
    answer: str
    format_ok: bool


def parse_qi_response(text: str, max_segments: int = MAX_SEGMENTS) -> QIResponse:
    """Read ``text`` against the strict template; see the module docstring for when
    ``format_ok`` holds."""
    text = str(text or "")
    whole = _TEMPLATE.fullmatch(text)
    if whole is None:
        return QIResponse((), "", first_answer_payload(text) or "", False)
    groundings = tuple(
        Grounding(float(pair.group(1)), float(pair.group(2)), pair.group(3).strip())
        for pair in _PAIR.finditer(whole.group("pairs"))
    )
    thinking, answer = whole.group("thinking").strip(), whole.group("answer").strip()
    ok = bool(groundings) and len(groundings) <= max_segments and bool(thinking) and bool(answer)
    return QIResponse(groundings, thinking, answer, ok and spans_ok(groundings))


def spans_ok(groundings: Sequence[Grounding]) -> bool:
    """Every caption non-empty, every span from ``start >= 0`` to a later ``end``, each
    starting no earlier than the previous one ends."""
    previous_end = -1.0
    for pair in groundings:
        if not pair.caption or pair.start < 0 or pair.end <= pair.start or pair.start < previous_end:
            return False
        previous_end = pair.end
    return True


def format_reward(response: QIResponse) -> float:
    """``r_format``: 1.0 for a well-formed response, else 0.0."""
    return 1.0 if response.format_ok else 0.0


def choice_letter(text: str) -> str:
    """The option letter A-H (upper-cased) that starts ``text`` after whitespace and is
    followed by ``.``, ``)``, ``:``, whitespace or the end ("B", "b.", "B) x", "B: x");
    ``""`` otherwise ("(B)", "Bx", "I")."""
    match = _LEADING_LETTER.match(str(text or ""))
    return match.group(1).upper() if match else ""


def choice_reward(answer: str, ground_truth: str) -> float:
    """Multiple-choice ``r_answer``: 1.0 when the answer has a letter and it is the ground truth's."""
    letter = choice_letter(answer)
    return 1.0 if letter and letter == choice_letter(ground_truth) else 0.0


def normalize_answer(text: str) -> str:
    """Case-folded, every character that is neither a word character nor whitespace read
    as a space, runs of whitespace as one space, no space at either end."""
    return " ".join(_NOT_WORD_OR_SPACE.sub(" ", str(text or "").casefold()).split())


def open_answer_matches(answer: str, ground_truth: str) -> bool:
    """The exact match verl-omni tries before asking the judge about an open answer."""
    return normalize_answer(answer) == normalize_answer(ground_truth)


@dataclass(frozen=True)
class QIRuleParts:
    """What the rules decide about one response."""

    format: float
    answer: float | None
    """``r_answer``, or None for an open answer only the judge can score."""
    num_groundings: int
    """Pairs the judge scores (all parsed pairs, also in a response whose format fails)."""
    multiple_choice: bool

    @property
    def needs_judge(self) -> bool:
        """verl-omni asks its judge: the response has pairs, or the row is not multiple choice."""
        return self.num_groundings > 0 or not self.multiple_choice


def rule_parts(
    solution_str: str, ground_truth: str, *, multiple_choice: bool, max_segments: int = MAX_SEGMENTS
) -> QIRuleParts:
    """The rule-decided parts of one response's QI reward."""
    response = parse_qi_response(solution_str, max_segments)
    answer: float | None
    if multiple_choice:
        answer = choice_reward(response.answer, ground_truth)
    else:
        answer = 1.0 if open_answer_matches(response.answer, ground_truth) else None
    return QIRuleParts(format_reward(response), answer, len(response.groundings), multiple_choice)


def compose_qi_score(
    parts: QIRuleParts,
    *,
    consistency: Sequence[float] = (),
    completeness: float = 0.0,
    open_answer: float | None = None,
) -> dict[str, float]:
    """Eq. (8) from the rule parts and the judge's numbers, each in [0, 1].

    In verl-omni the judge (an OpenAI-compatible Qwen3-VL server, default
    ``Qwen/Qwen3-VL-8B-Instruct``, temperature 0, at most 256 tokens, replying
    ``{"score", "reason"}``; a score is clamped to [0, 1], an unreadable reply is 0) gives:

    Args:
        consistency: one score per pair, in order: the judge shown the pair's span (at most 8
            frames, one a second; :mod:`omni_rewards.video_spans`) and its caption, with the
            paper's Figure 11 rubric. A span without two frames to show scores 0. Averaged; 0
            without pairs.
        completeness: one score: the judge shown every pair's frames together (evenly
            thinned to at most 32), ``extra_info.question`` and the ground truth, with the
            Figure 12 prompt. 0 without pairs, or when any span failed to decode.
        open_answer: for an open answer that is no exact match (``parts.answer is None``):
            the judge's score of the answer against the reference, text only, given the
            question. Must be None otherwise.

    Returns:
        ``score``, ``format``, ``answer``, ``consistency`` (the mean), ``completeness``,
        ``intent`` (``0.5 * (consistency + completeness)``) and ``num_groundings``.

    Raises:
        ValueError: a judge number is missing, extra, or not a finite number in [0, 1].
    """
    answer = _answer(parts, open_answer)
    scores = [_unit(value, f"consistency[{i}]") for i, value in enumerate(consistency)]
    if len(scores) != parts.num_groundings:
        raise ValueError(f"consistency needs one score per grounding pair: {parts.num_groundings}, got {len(scores)}.")
    completeness = _unit(completeness, "completeness")
    if parts.num_groundings == 0 and completeness != 0.0:
        raise ValueError(f"completeness is 0 for a response without grounding pairs, got {completeness}.")
    mean = sum(scores) / len(scores) if scores else 0.0
    intent = 0.5 * (mean + completeness)
    return {
        "score": parts.format + answer + intent,
        "format": parts.format,
        "answer": answer,
        "consistency": mean,
        "completeness": completeness,
        "intent": intent,
        "num_groundings": float(parts.num_groundings),
    }


def _answer(parts: QIRuleParts, open_answer: float | None) -> float:
    if parts.answer is None:
        if open_answer is None:
            raise ValueError("open_answer is needed: this open answer is no exact match, so the judge scores it.")
        return _unit(open_answer, "open_answer")
    if open_answer is not None:
        raise ValueError("open_answer is only for an open answer the rules cannot score; the rules scored this one.")
    return parts.answer


def _unit(value: float, name: str) -> float:
    number = float(value)
    if not (math.isfinite(number) and 0.0 <= number <= 1.0):
        raise ValueError(f"{name} must be a finite number in [0, 1] (clamp the judge's reply), got {value!r}.")
    return number


@SCORERS.register(DATA_SOURCE)
def score_omnivideo_qi(
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
    *,
    max_segments: int = MAX_SEGMENTS,
) -> dict[str, float]:
    """The QI reward of a response that needs no judge; see the module docstring.

    Raises:
        JudgeRequiredError: the response has grounding pairs, or the row is not multiple choice.
    """
    multiple_choice = bool((extra_info or {}).get("is_multiple_choice", False))
    parts = rule_parts(str(solution_str or ""), str(ground_truth or ""), multiple_choice=multiple_choice,
                       max_segments=max_segments)
    if parts.needs_judge:
        raise JudgeRequiredError(_judge_message(parts))
    return compose_qi_score(parts)


def _judge_message(parts: QIRuleParts) -> str:
    why = (
        f"it has {parts.num_groundings} <time>/<caption> pair(s) to check against the video"
        if parts.num_groundings
        else "its row is open-ended (extra_info.is_multiple_choice is false)"
    )
    return (
        f"omnivideo_r1_qi: this response needs the intent judge ({why}); the registered scorer scores only "
        "multiple-choice responses without grounding pairs. Serve a judge (reward.reward_model.enable=true "
        "reward.reward_model.model_path=<a vision-language model>) and name the judged reward: "
        "reward.custom_reward_function.path=pkg://omni_rewards.scorers.omnivideo_qi_judge "
        "reward.custom_reward_function.name=compute_score."
    )
