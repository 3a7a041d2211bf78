"""``compute_score``: one response, verl's custom-reward-function call shape."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from numbers import Real
from typing import Any

from omni_rewards.errors import ScorerOutputError
from omni_rewards.registry import SCORERS, Scorer

GroundTruth = str | Mapping[str, Any]
"""What a scorer is scored against: a row's ``reward_model.ground_truth``, as text, or as a
mapping where the recipe writes one (AudioMCQ's answer with its choices)."""


def as_ground_truth(value: object) -> GroundTruth:
    """A row's ground truth as scorers receive it: a mapping unchanged (``str()`` of it would
    hand the scorer Python's repr), anything else as text, as verl passes a string."""
    return value if isinstance(value, Mapping) else str(value)


def ground_truth_text(value: object) -> str:
    """A ground truth for logs and dumps: text as it is, a mapping as JSON (arrays as lists)."""
    if not isinstance(value, Mapping):
        return str(value)
    return json.dumps(dict(value), ensure_ascii=False, sort_keys=True, default=_plain)


def _plain(value: object) -> object:
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else str(value)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: GroundTruth,
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
    ground_truth: GroundTruth,
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

