"""gsm8k (``openai/gsm8k``): the final answer after ``####``, binary score.

The default ``strict`` method gives exactly verl's strict gsm8k scores on the same inputs,
so runs compare across frameworks: only the last 300 characters are searched, the answer
is the last ``#### <number>`` (ASCII digits, ``.`` and ``,``; commas then dropped), and it
must equal the ground truth string as given. ``flexible`` takes the last number instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from omni_rewards.registry import SCORERS

Gsm8kMethod = Literal["strict", "flexible"]
GSM8K_METHODS: tuple[Gsm8kMethod, ...] = ("strict", "flexible")

# verl only looks at the tail of the response (the answer comes last); the same window is
# needed for parity, and it bounds the regex cost on huge responses.
TAIL_CHARS = 300

_STRICT_ANSWER = re.compile(r"#### (-?[0-9.,]+)")
_ANY_NUMBER = re.compile(r"-?[0-9.,]+")


def _clean(number: str) -> str:
    return number.replace(",", "").replace("$", "")


def extract_gsm8k_answer(solution_str: str, method: Gsm8kMethod = "strict") -> str | None:
    """The final answer in ``solution_str``, or None when there is none.

    Raises:
        ValueError: ``method`` is not one of :data:`GSM8K_METHODS`.
    """
    tail = solution_str[-TAIL_CHARS:]
    if method == "strict":
        found = _STRICT_ANSWER.findall(tail)
        return _clean(found[-1]) if found else None
    if method == "flexible":
        numbers = [n for n in _ANY_NUMBER.findall(tail) if any(c.isdigit() for c in n)]
        return _clean(numbers[-1]) if numbers else None
    raise ValueError(f"Unknown gsm8k method {method!r}; choose one of {', '.join(GSM8K_METHODS)}.")


@SCORERS.register("openai/gsm8k", "gsm8k")
def score_gsm8k(
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
    *,
    method: Gsm8kMethod = "strict",
) -> dict[str, float]:
    """1.0 when the extracted answer equals ``ground_truth``, else 0.0."""
    answer = extract_gsm8k_answer(solution_str, method)
    correct = float(answer is not None and answer == ground_truth)
    return {"score": correct, "accuracy": correct}
