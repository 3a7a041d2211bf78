"""The reward of omni-rl's built-in task (the embedded default): answer with a number.

It is verifiable and has variance soon after random initialisation, which a tiny model
needs to learn from:

- 1.0 when the response starts with a digit (this is also ``acc``),
- 0.5 when a digit appears later in the response,
- 0.0 otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omni_rewards.registry import SCORERS

DATA_SOURCE = "omni_rl/builtin_digits"


@SCORERS.register(DATA_SOURCE)
def score_digits(
    solution_str: str, ground_truth: str, extra_info: Mapping[str, Any] | None = None, **_: Any
) -> dict[str, float]:
    """The built-in task's reward (see the module docstring)."""
    text = solution_str.strip()
    starts = bool(text) and text[0].isdigit()
    contains = any(ch.isdigit() for ch in text)
    score = 1.0 if starts else 0.5 if contains else 0.0
    return {"score": score, "acc": float(starts)}
