"""TEST ORACLE: the seeds' MMK12 and AVQA reward formulas, written from their stated facts
(issue 16), independently of ``omni_rewards``: none of its code is used here, and the text
handling is written differently on purpose (string scanning instead of shared regexes), so
a shared mistake is unlikely. Used by ``test_reference_parity.py`` and
``benchmarks/rewards.py``.

The facts (verl-omni's ``mmk12_reward.py`` / ``choice_reward.py``):

- ``°``, ``^\\circ``, ``\\circ`` after a number are removed from both sides first.
- Correctness reads the stripped inner text of the first ``<answer>…</answer>`` pair, else
  the whole response.
- Ground truth one letter A–E (either case): the last standalone capital A–E of the
  content decides (1 or 0); with no such letter, math verification of the content against
  the correct option's text (``extra_info["options"]``, JSON text; anything unreadable is
  "no options") gives 0.5. The option text is angle-normalised too (the reference's
  docstring; its code does not, which this oracle does not copy).
- Otherwise: math verification with verl's settings (``math_verify._verify_in_subprocess``,
  any exception is 0).
- Format: ``format_score`` × (exactly one ``<answer>`` and one ``</answer>`` + a
  ``\\boxed{`` inside the first answer) / 2; ``score = (accuracy + format) / (1 + format_score)``.
- Choice (AVQA): 1.0 when the first answer payloads of response and ground truth, both
  stripped, are equal.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Mapping
from typing import Any

Verify = Callable[[str, str], float]
"""``(boxed ground truth, prediction) -> 1.0 | 0.0``, verl's ``_verify_in_subprocess``."""

_OPEN, _CLOSE = "<answer>", "</answer>"
_ASCII_LETTERS = frozenset(string.ascii_letters)


def strip_angle_markers(text: str) -> str:
    """Remove a degree marker (optionally after whitespace) that follows a number."""
    out: list[str] = []
    i = 0
    while i < len(text):
        out.append(text[i])
        if text[i].isdecimal() and (i + 1 == len(text) or not text[i + 1].isdecimal()):
            if _number_ends_here(text, i):
                j = i + 1
                while j < len(text) and text[j].isspace():
                    j += 1
                for marker in ("°", "^\\circ", "\\circ"):
                    if text.startswith(marker, j):
                        i = j + len(marker)
                        break
                else:
                    i += 1
                continue
        i += 1
    return "".join(out)


def _number_ends_here(text: str, i: int) -> bool:
    # "7.5" ends at the 5, and so does "7" in "7.": a number is digits, optionally
    # "." + digits; every digit run that is not followed by ".<digit>" ends a number.
    return not (i + 2 < len(text) and text[i + 1] == "." and text[i + 2].isdecimal())


def first_answer(text: str) -> str | None:
    start = text.find(_OPEN)
    if start < 0:
        return None
    end = text.find(_CLOSE, start + len(_OPEN))
    return None if end < 0 else text[start + len(_OPEN) : end].strip()


def last_capital_choice(content: str) -> str | None:
    found = None
    for i, char in enumerate(content):
        if char not in "ABCDE":
            continue
        before = content[i - 1] if i > 0 else ""
        after = content[i + 1] if i + 1 < len(content) else ""
        if before not in _ASCII_LETTERS and after not in _ASCII_LETTERS:
            found = char
    return found


def option_text(extra_info: Mapping[str, Any] | None, letter: str) -> str:
    raw = (extra_info or {}).get("options")
    if not isinstance(raw, str) or not raw:
        return ""
    try:
        options = json.loads(raw)
    except ValueError:
        return ""
    if not isinstance(options, dict):
        return ""
    value = options.get(letter)
    return value if isinstance(value, str) else ""


def mmk12_reference(
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None,
    verify: Verify,
    format_score: float = 0.3,
) -> dict[str, float]:
    truth = strip_angle_markers(str(ground_truth).strip())
    solution = strip_angle_markers(solution_str or "")
    answer = first_answer(solution)
    content = solution if answer is None else answer

    if len(truth) == 1 and truth.upper() in "ABCDE":
        letter = last_capital_choice(content)
        if letter is not None:
            accuracy = 1.0 if letter == truth.upper() else 0.0
        else:
            text = strip_angle_markers(option_text(extra_info, truth.upper()))
            accuracy = 0.5 * verify("\\boxed{" + text + "}", content) if text else 0.0
    else:
        accuracy = verify("\\boxed{" + truth + "}", content)

    tags_ok = answer is not None and solution.count(_OPEN) == 1 and solution.count(_CLOSE) == 1
    boxed_ok = answer is not None and "\\boxed{" in answer
    format_reward = format_score * (int(tags_ok) + int(boxed_ok)) / 2.0
    return {
        "score": (accuracy + format_reward) / (1.0 + format_score),
        "accuracy": accuracy,
        "format_reward": format_reward,
    }


def choice_reference(solution_str: str, ground_truth: str) -> dict[str, float]:
    prediction = first_answer(str(solution_str or "")) or ""
    target = first_answer(str(ground_truth or "")) or ""
    accuracy = float(prediction == target)
    return {"score": accuracy, "accuracy": accuracy}
