"""Reward scoring for omni-rl, usable on its own (e.g. from another trainer).

- :func:`compute_score`: one response, verl's custom-reward-function call shape.
- :data:`SCORERS`: scorers by ``data_source`` (gsm8k, math, MMK12, choice); add your own.
- :class:`RewardManager`: a batch in parallel worker processes with a per-sample timeout.
- :class:`HttpScorerClient`: a remote reward service over JSON/HTTP.
"""

from omni_rewards import scorers as _builtin_scorers  # noqa: F401  (registers the built-ins)
from omni_rewards.api import compute_score, normalise_output
from omni_rewards.errors import (
    RemoteScorerError,
    RewardError,
    RewardWorkerError,
    ScorerOutputError,
    ScorerRegistrationError,
    UnknownDataSourceError,
)
from omni_rewards.http_client import HttpScorerClient, HttpScorerConfig, ScoreRequest
from omni_rewards.manager import RewardManager, RewardManagerConfig
from omni_rewards.outcomes import BatchResult, SampleOutcome
from omni_rewards.registry import SCORERS, Scorer, ScorerRegistry

__all__ = [
    "SCORERS",
    "BatchResult",
    "HttpScorerClient",
    "HttpScorerConfig",
    "RemoteScorerError",
    "RewardError",
    "RewardManager",
    "RewardManagerConfig",
    "RewardWorkerError",
    "SampleOutcome",
    "ScoreRequest",
    "Scorer",
    "ScorerOutputError",
    "ScorerRegistrationError",
    "ScorerRegistry",
    "UnknownDataSourceError",
    "compute_score",
    "normalise_output",
]
