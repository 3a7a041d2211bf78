"""MMK12 (``mmk12``): accuracy plus a progressive format reward, as verl-omni's
``mmk12_reward.py`` defines it (the seeds' MMK12 recipe).

Angles first: ``°``, ``^\\circ`` and ``\\circ`` written after a number are removed from the
response and the ground truth (``\\degree``, ``º`` and ``^{\\circ}`` are not).

Accuracy reads the stripped content of the **first** ``<answer>…</answer>`` pair when there
is one, else the whole response:

- A ground truth that is one letter A–E, either case, is a choice question. The last
  standalone capital A–E of the content decides: 1.0 when it is the correct letter, else 0.
  Only when the content has no such letter is it compared with the correct option's text
  (``extra_info["options"]``) by math-verify, for 0.5.
- Any other ground truth: math-verify of the content against it (verl's settings, see
  :mod:`omni_rewards.equivalence`). No shortcut: ``\\boxed{.5}`` is not 5.

Format reward: two equal halves of ``format_score`` — exactly one ``<answer>`` and one
``</answer>`` in the response; a ``\\boxed{`` inside the first answer's content. The ladder
is 0 / 0.15 / 0.3 at the default 0.3, and ``format_reward`` is reported weighted, as the
reference logs it. ``score = (accuracy + format_reward) / (1 + format_score)``.

Two deliberate differences from the reference's code, both where it contradicts its own
docstring or the dataset contract:

- The option text is angle-normalised too. The reference's docstring promises the 0.5 for
  a value that matches the option, but its code leaves ``45°`` in the option text, which
  math-verify cannot parse, so such an option could never earn it. We follow the docstring.
- Malformed ``extra_info["options"]`` means "no options", as there, but is also reported
  (``data_problem`` = 1, summed into ``reward/data_problems``), where the reference crashes
  on options that are JSON but not an object. Options given as a mapping rather than JSON
  text are read (a parquet struct column reads back as one); the reference ignores them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from omni_rewards.equivalence import math_equivalent
from omni_rewards.registry import SCORERS
from omni_rewards.scorers.options import read_options
from omni_rewards.text import first_answer_payload, has_one_answer_tag_each, normalise_angles

DEFAULT_FORMAT_SCORE = 0.3
DEFAULT_MATH_VERIFY_TIMEOUT_S = 20.0
OPTION_VALUE_CREDIT = 0.5
CHOICE_LETTERS = "ABCDE"

_STANDALONE_LETTER = re.compile(r"(?<![A-Za-z])[A-E](?![A-Za-z])")
_BOXED_OPENING = "\\boxed{"


def is_choice_truth(truth: str) -> bool:
    """A single letter A–E, either case (verl-omni's converter writes lowercase ones)."""
    return len(truth) == 1 and truth.upper() in CHOICE_LETTERS


def last_choice_letter(content: str) -> str | None:
    """The last capital A–E not touching another Latin letter (``\\boxed{B}``, ``(B)``, ``B.``)."""
    letters = _STANDALONE_LETTER.findall(content)
    return letters[-1] if letters else None


def format_reward(solution_str: str, answer: str | None, format_score: float) -> float:
    """``format_score`` × (exactly one of each answer tag + a ``\\boxed{`` in the answer) / 2."""
    one_pair = answer is not None and has_one_answer_tag_each(solution_str)
    boxed = answer is not None and _BOXED_OPENING in answer
    return format_score * (int(one_pair) + int(boxed)) / 2.0


@SCORERS.register("mmk12")
def score_mmk12(
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
    *,
    format_score: float = DEFAULT_FORMAT_SCORE,
    math_verify_timeout: float = DEFAULT_MATH_VERIFY_TIMEOUT_S,
) -> dict[str, float]:
    """The MMK12 reward of one response.

    Args:
        format_score: the format reward's full weight (both checks passed).
        math_verify_timeout: seconds one math-verify comparison may take; a slower one
            counts as wrong, as in the reference (the manager's ``timeout_s`` bounds the
            whole sample on top).

    Returns:
        ``score``, ``accuracy`` (0, 0.5 or 1), ``format_reward`` (weighted) and
        ``data_problem`` (1.0 when ``extra_info["options"]`` is present but malformed,
        whatever the answer).

    Raises:
        ValueError: ``format_score`` is negative or ``math_verify_timeout`` not positive
            (configuration errors, not data).
    """
    if not (format_score >= 0 and math.isfinite(format_score)):
        raise ValueError(f"format_score must be a finite number >= 0, got {format_score}.")
    if not math_verify_timeout > 0:
        raise ValueError(f"math_verify_timeout must be > 0 seconds, got {math_verify_timeout}.")
    truth = normalise_angles(str(ground_truth).strip())
    solution = normalise_angles(solution_str or "")
    answer = first_answer_payload(solution)
    content = answer if answer is not None else solution

    options = read_options(extra_info)
    if is_choice_truth(truth):
        letter = last_choice_letter(content)
        if letter is not None:
            accuracy = float(letter == truth.upper())
        else:
            option_text = options.by_letter.get(truth.upper(), "")
            matches = bool(option_text) and math_equivalent(
                content, normalise_angles(option_text), budget_s=math_verify_timeout
            )
            accuracy = OPTION_VALUE_CREDIT if matches else 0.0
    else:
        accuracy = float(math_equivalent(content, truth, budget_s=math_verify_timeout))

    fmt = format_reward(solution, answer, format_score)
    return {
        "score": (accuracy + fmt) / (1.0 + format_score),
        "accuracy": accuracy,
        "format_reward": fmt,
        "data_problem": float(options.problem is not None),
    }
