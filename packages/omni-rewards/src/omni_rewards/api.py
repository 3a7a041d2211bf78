"""``compute_score``: one response, verl's custom-reward-function call shape."""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Real
from typing import Any

from omni_rewards.errors import ScorerOutputError
from omni_rewards.registry import SCORERS, Scorer


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """Score one response with the scorer registered for ``data_source``.

    The signature is verl's custom reward function's, so
    ``custom_reward_function.path=<omni_rewards>/api.py``, ``name=compute_score`` plugs it
    into verl. Extra keyword arguments (verl's ``reward_kwargs``) go to the scorer, e.g.
    ``method="flexible"`` for gsm8k or ``format_score=0.5`` for MMK12.

    Returns:
        ``{"score": float, <sub-metric>: float, ...}``.

    Raises:
        UnknownDataSourceError: no scorer is registered for ``data_source``.
        ScorerOutputError: the scorer returned no finite ``"score"``.
    """
    return run_scorer(SCORERS.get(data_source), solution_str, ground_truth, extra_info, **kwargs)


def run_scorer(
    scorer: Scorer,
    solution_str: str,
    ground_truth: str,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """Call ``scorer`` and check its output (what the manager's worker processes run)."""
    return normalise_output(scorer(solution_str, ground_truth, extra_info, **kwargs), scorer)


def normalise_output(raw: object, scorer: object = None) -> dict[str, float]:
    """A scorer's output as ``{"score": float, ...}``; a bare number becomes the score.

    Raises:
        ScorerOutputError: no ``"score"``, a non-numeric value, or a NaN/infinite score.
    """
    who = getattr(scorer, "__qualname__", None) or "the scorer"
    if isinstance(raw, Real):
        raw = {"score": raw}
    if not isinstance(raw, Mapping) or "score" not in raw:
        raise ScorerOutputError(
            f"{who} returned {type(raw).__name__} {_short(raw)}; a scorer must return a "
            'number or a mapping with a "score" key.'
        )
    out: dict[str, float] = {}
    for key, value in raw.items():
        if not isinstance(value, Real):
            raise ScorerOutputError(
                f"{who} returned a non-numeric {key!r}: {_short(value)}; every value in a "
                "scorer's result must be a number."
            )
        out[str(key)] = float(value)
    if not math.isfinite(out["score"]):
        raise ScorerOutputError(
            f"{who} returned score={out['score']}; scores must be finite numbers."
        )
    return out


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."

