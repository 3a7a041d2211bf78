"""Multiple choice (``avqa_r1_6k``): exact match of the first ``<answer>`` payload.

The ground truth is the tagged label (``<answer>B</answer>``) or the bare label (``B``).
Only an exact match (surrounding whitespace ignored) scores: an empty payload, several
letters ("A or B") or a letter outside the options all score 0, which closes the
reward-hacking routes seen with looser matching.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omni_rewards.registry import SCORERS
from omni_rewards.text import answer_payloads


def label_of(ground_truth: str) -> str:
    """The label inside a tagged ground truth, or the ground truth itself, stripped."""
    payloads = answer_payloads(ground_truth)
    return (payloads[0] if payloads else ground_truth).strip()


@SCORERS.register("avqa_r1_6k", "choice")
def score_choice(
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """1.0 when the first ``<answer>`` payload is exactly the label, else 0.0.

    Raises:
        ValueError: the ground truth has an empty label (a dataset error, not a model one).
    """
    label = label_of(ground_truth)
    if not label:
        raise ValueError(
            f"Empty choice label in ground truth {ground_truth!r}; expected e.g. "
            "'<answer>B</answer>' or 'B'. Fix the dataset's reward_model.ground_truth."
        )
    payloads = answer_payloads(solution_str)
    correct = float(bool(payloads) and payloads[0].strip() == label)
    return {"score": correct, "accuracy": correct}
