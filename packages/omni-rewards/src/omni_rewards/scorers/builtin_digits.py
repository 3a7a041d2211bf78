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
JUDGE_RUBRIC = ('Score the answer: 1 if it starts with a digit, 0.5 if a digit appears later, else 0. '
                'Reply with JSON, {{"score": x}}.\nAnswer: {answer}')
"""What the built-in judged task asks its judge about each answer (the rule above, in words)."""


@SCORERS.register(DATA_SOURCE)
def score_digits(
    solution_str: str, ground_truth: str, extra_info: Mapping[str, Any] | None = None, **_: Any
) -> dict[str, float]:
    """The built-in task's reward (see the module docstring)."""
    score = digits_rule(solution_str)
    return {"score": score, "acc": float(score == 1.0)}


def digits_rule(solution_str: str) -> float:
    """1.0 when the stripped response starts with a digit, 0.5 when it holds one later, else 0.0."""
    text = solution_str.strip()
    return 1.0 if text and text[0].isdigit() else 0.5 if any(ch.isdigit() for ch in text) else 0.0


def judge_answer(score: float) -> str:
    """The judge's answer for ``score`` under :data:`JUDGE_RUBRIC` (what a tiny judge is taught)."""
    return '{"score": %s}' % ("1" if score == 1.0 else "0.5" if score == 0.5 else "0")


async def compute_score_judged(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Mapping[str, Any] | None = None,
    reward_router_address: str | None = None, reward_model_tokenizer: Any = None, **_: Any,
) -> dict[str, float]:
    """The built-in task's reward asked of a judge (``reward.reward_model``; a reward function with
    verl-omni's signature: ``reward.custom_reward_function.path=pkg://omni_rewards.scorers.builtin_digits``,
    ``name=compute_score_judged``). ``rule_agrees``: whether the judge's score is the rule's."""
    from omni_rewards.judge import ajudge_score

    if reward_router_address is None:
        raise ValueError("compute_score_judged asks a judge: enable reward.reward_model")
    verdict = await ajudge_score(reward_router_address, JUDGE_RUBRIC.format(answer=solution_str),
                                 model=getattr(reward_model_tokenizer, "name_or_path", None), max_tokens=16)
    rule = digits_rule(solution_str)
    return {"score": verdict.score, "acc": float(verdict.score == 1.0), "rule_agrees": float(verdict.score == rule)}
