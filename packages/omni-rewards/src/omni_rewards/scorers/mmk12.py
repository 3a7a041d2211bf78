"""MMK12 (``mmk12``): accuracy plus a progressive format reward.

Accuracy reads the ``<answer>…</answer>`` payload (the last one) when there is one, else the
whole response:

- choice ground truths (one letter A–E): 1.0 when the last standalone letter A–E is the
  correct one; 0.5 when the model wrote the correct option's value instead of its letter
  (options in ``extra_info["options"]``); else 0.
- anything else: math-verify equivalence, after removing degree markers on both sides. An
  answer that is literally the ground truth (the boxed content equal to
  it up to spaces, ``$`` and degree markers) is accepted without calling math-verify: the
  common case of a correct answer costs microseconds instead of milliseconds. Only boxed
  answers take this path, where math-verify agrees; an unboxed ``x^2-1`` is math-verify's
  call (it parses no bare LaTeX).

Format reward: 0.5 for exactly one answer-tag pair, 1.0 when a ``\\boxed{}`` sits inside it.
``score = (accuracy + format_weight * format_reward) / (1 + format_weight)``, in [0, 1].
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from omni_rewards.equivalence import math_equivalent
from omni_rewards.registry import SCORERS
from omni_rewards.scorers.options import read_options
from omni_rewards.text import (
    answer_payloads,
    has_single_answer_pair,
    last_boxed_content,
    normalise_angles,
)

DEFAULT_FORMAT_WEIGHT = 0.3
OPTION_VALUE_CREDIT = 0.5

_CHOICE_TRUTH = re.compile(r"[A-E]")
_STANDALONE_LETTER = re.compile(r"(?<![A-Za-z])[A-E](?![A-Za-z])")
_SPACES = re.compile(r"\s+")


def _answer_text(solution_str: str) -> str:
    payloads = answer_payloads(solution_str)
    return payloads[-1] if payloads else solution_str


Equivalence = Callable[[str, str], bool]
"""``(prediction, ground_truth) -> bool``; math-verify by default."""


def _canonical(text: str) -> str:
    return _SPACES.sub("", normalise_angles(text)).strip("$.")


def _written_answer(answer: str) -> str:
    boxed = last_boxed_content(answer)
    return answer if boxed is None else boxed


def _literally_equal(written: str, truth: str) -> bool:
    canonical_truth = _canonical(truth)
    return bool(canonical_truth) and _canonical(written) == canonical_truth


def _same_value(written: str, value: str, equivalent: Equivalence) -> bool:
    if _literally_equal(written, value):
        return True
    return equivalent(normalise_angles(written), normalise_angles(value))


def choice_accuracy(
    answer: str,
    letter: str,
    options: Mapping[str, str] | None,
    equivalent: Equivalence = math_equivalent,
) -> float:
    """Accuracy of ``answer`` for a choice question whose correct option is ``letter``."""
    letters = _STANDALONE_LETTER.findall(answer)
    if letters and letters[-1] == letter:
        return 1.0
    if options is None or letter not in options:
        return 0.0
    written = _written_answer(answer)
    return OPTION_VALUE_CREDIT if _same_value(written, options[letter], equivalent) else 0.0


def value_accuracy(
    answer: str, ground_truth: str, equivalent: Equivalence = math_equivalent
) -> float:
    """Accuracy of ``answer`` for a numeric or LaTeX ground truth."""
    boxed = last_boxed_content(answer)
    if boxed is not None and _literally_equal(boxed, ground_truth):
        return 1.0
    return float(equivalent(normalise_angles(answer), normalise_angles(ground_truth)))


def format_reward(solution_str: str) -> float:
    """0, 0.5 (exactly one answer-tag pair) or 1.0 (and a ``\\boxed{}`` inside it)."""
    if not has_single_answer_pair(solution_str):
        return 0.0
    payload = answer_payloads(solution_str)[0]
    return 1.0 if last_boxed_content(payload) is not None else 0.5


@SCORERS.register("mmk12")
def score_mmk12(
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
    *,
    format_weight: float = DEFAULT_FORMAT_WEIGHT,
    equivalent: Equivalence = math_equivalent,
) -> dict[str, float]:
    """Composite MMK12 reward; returns ``score``, ``accuracy`` and ``format_reward``.

    ``equivalent`` replaces the math check (math-verify), e.g. to score with another
    framework's checker for a side-by-side comparison.

    Raises:
        ValueError: ``format_weight`` is negative, or ``extra_info["options"]`` is malformed.
    """
    if format_weight < 0:
        raise ValueError(f"format_weight must be >= 0, got {format_weight}.")
    answer = _answer_text(solution_str)
    truth = ground_truth.strip()
    if _CHOICE_TRUTH.fullmatch(truth):
        accuracy = choice_accuracy(answer, truth, read_options(extra_info), equivalent)
    else:
        accuracy = value_accuracy(answer, truth, equivalent)
    fmt = format_reward(solution_str)
    score = (accuracy + format_weight * fmt) / (1.0 + format_weight)
    return {"score": score, "accuracy": accuracy, "format_reward": fmt}
