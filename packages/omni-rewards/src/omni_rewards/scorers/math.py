"""Generic math (``math``): ``\\boxed{}`` extraction and math-verify equivalence.

Gives verl's math-verify scorer's results on the same inputs (see
:mod:`omni_rewards.equivalence` for the shared settings).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omni_rewards.equivalence import math_equivalent
from omni_rewards.registry import SCORERS


@SCORERS.register("math")
def score_math(
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """1.0 when the response's (last boxed) answer is equivalent to ``ground_truth``."""
    correct = float(math_equivalent(solution_str, ground_truth))
    return {"score": correct, "accuracy": correct}
