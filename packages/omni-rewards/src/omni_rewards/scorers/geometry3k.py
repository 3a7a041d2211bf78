"""Geometry3K (``hiyouga/geometry3k``): verl's own geo3k reward, the one verl-omni's recipe uses.

verl's ``default_compute_score`` sends ``hiyouga/geometry3k`` to
``verl.utils.reward_score.geo3k.compute_score``; this scorer gives its score on every input,
at its defaults (``format_score`` 0.1, ``use_boxed`` True):

- accuracy (0 or 1): mathruler's ``grade_answer`` of the response's last ``\\boxed{...}``
  (mathruler's ``extract_boxed_content``: braces balanced, stripped; the literal text
  ``"None"`` when there is no closed box) against the ground truth. mathruler is called, not
  re-implemented, so string normalisation and sympy equivalence are verl's exactly.
- format (0 or 1): the response starts with ``<think>`` (nothing before it, not even
  whitespace), has a ``</think>`` after it, then a ``\\boxed{`` after that, and a ``}``
  after that. Anything may sit between and after them, newlines included.
- ``score = (1 - format_score) * accuracy + format_score * format``: 0, 0.1, 0.9 or 1.0.

No timeout of its own: verl has none around mathruler either, so a guard here could only
turn a slow correct answer into a 0 that verl would not give. sympy can still run for a
very long time on an adversarial box: ``\\boxed{9**9**9}`` or ``\\boxed{99999999!}`` against
``2\\sqrt{3}`` ran past 20 s here (mathruler's filters only look at ``^``; against an integer
ground truth sympy only ever sees a plain number, so those are safe). The reward manager's per-sample ``timeout_s``
kills such a worker and scores the sample 0, counted in ``reward/timeouts``, where verl's
reward loop would stall.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from omni_rewards.registry import SCORERS

DEFAULT_FORMAT_SCORE = 0.1

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
BOXED_OPEN = "\\boxed{"


@cache
def _mathruler() -> tuple[Callable[[str], str], Callable[[str, str], bool]]:
    """mathruler's extractor and grader, imported on first use: they pull in sympy and
    pylatexenc (seconds), which users of the other scorers should not pay for."""
    from mathruler.grader import extract_boxed_content, grade_answer  # type: ignore[import-untyped]

    return extract_boxed_content, grade_answer


def follows_format(response: str) -> bool:
    """``<think>`` first, then ``</think>``, then ``\\boxed{``, then ``}``, in that order.

    Taking the first occurrence of each marker after the previous one finds the order
    whenever any choice of occurrences has it.
    """
    if not response.startswith(THINK_OPEN):
        return False
    close = response.find(THINK_CLOSE, len(THINK_OPEN))
    if close < 0:
        return False
    boxed = response.find(BOXED_OPEN, close + len(THINK_CLOSE))
    return boxed >= 0 and response.find("}", boxed + len(BOXED_OPEN)) >= 0


def is_correct(response: str, ground_truth: str, *, use_boxed: bool) -> bool:
    """mathruler's verdict on the last box (or, without ``use_boxed``, the whole response)."""
    extract_boxed_content, grade_answer = _mathruler()
    answer = extract_boxed_content(response) if use_boxed else response
    return bool(grade_answer(answer, ground_truth))


@SCORERS.register("hiyouga/geometry3k", "geometry3k")
def score_geometry3k(
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
    *,
    format_score: float = DEFAULT_FORMAT_SCORE,
    use_boxed: bool = True,
) -> dict[str, float]:
    """The Geometry3K reward of one response.

    Args:
        format_score: the weight of the format check; accuracy gets the rest.
        use_boxed: grade the last ``\\boxed{}`` (verl's default) rather than the whole response.

    Returns:
        ``score``, ``accuracy`` (0 or 1) and ``format`` (0 or 1, unweighted).

    Raises:
        ValueError: ``format_score`` is not between 0 and 1 (a configuration error).
    """
    if not (math.isfinite(format_score) and 0.0 <= format_score <= 1.0):
        raise ValueError(f"format_score must be between 0 and 1, got {format_score}.")
    accuracy = float(is_correct(solution_str, ground_truth, use_boxed=use_boxed))
    fmt = float(follows_format(solution_str))
    return {
        "score": (1.0 - format_score) * accuracy + format_score * fmt,
        "accuracy": accuracy,
        "format": fmt,
    }
