"""Multiple choice (``avqa_r1_6k``, ``nextqa``, ``avqa_video``): exact match of the first ``<answer>``
payload, as verl-omni's ``choice_reward.py`` scores the seeds' AVQA recipe and its NExT-QA
recipe (TinyLLaVA-Video-R1's NextQA: five options A-E, ground truth ``<answer>X</answer>``
with the letter upper-cased by ``omni_data.convert.nextqa``).

The ground truth is the tagged label (``<answer>B</answer>``) or the bare label (``B``).
Only an exact match (surrounding whitespace ignored) scores: an empty payload, several
letters ("A or B") or a letter outside the options all score 0.

One deliberate difference: a ground truth whose label is blank (``<answer> </answer>``,
or empty) is a data problem. The reference then compares the prediction with an empty
label and pays 1.0 for an empty or missing answer; here it scores 0 and is counted
(``data_problem`` = 1, summed into ``reward/data_problems``). The AVQA and NExT-QA
converters drop such rows before training.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omni_rewards.registry import SCORERS
from omni_rewards.text import first_answer_payload


def label_of(ground_truth: str) -> str:
    """The label inside a tagged ground truth, or the ground truth itself, stripped."""
    payload = first_answer_payload(ground_truth)
    return payload if payload is not None else ground_truth.strip()


@SCORERS.register("avqa_r1_6k", "nextqa", "avqa_video", "choice")
def score_choice(
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """1.0 when the first ``<answer>`` payload is exactly the label, else 0.0.

    Returns:
        ``score``, ``accuracy`` and ``data_problem`` (1.0 when the label is blank).
    """
    label = label_of(ground_truth)
    if not label:
        return {"score": 0.0, "accuracy": 0.0, "data_problem": 1.0}
    correct = float(first_answer_payload(solution_str) == label)
    return {"score": correct, "accuracy": correct, "data_problem": 0.0}
