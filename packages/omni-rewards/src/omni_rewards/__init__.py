"""Reward scoring for omni-rl, usable on its own (e.g. from another trainer).

- :func:`compute_score`: one response, verl's custom-reward-function call shape.
- :data:`SCORERS`: scorers by ``data_source`` (gsm8k, math, MMK12, choice); add your own.
- :class:`RewardManager`: a batch in parallel worker processes with a per-sample timeout.
- :class:`HttpScorerClient`: a remote reward service over JSON/HTTP (text or speech).
- :mod:`omni_rewards.audio`: speech rewards (:data:`AUDIO_SCORERS`, signal-level rewards,
  :class:`WeightedAudioReward` built from config).
"""

from omni_rewards import scorers as _builtin_scorers  # noqa: F401  (registers the built-ins)
from omni_rewards.api import compute_score, normalise_output
from omni_rewards.audio import (
    AUDIO_SCORERS,
    AudioRewardSpec,
    AudioScorer,
    AudioScoreRequest,
    SpeechSample,
    WeightedAudioReward,
)
from omni_rewards.errors import (
    AudioRewardConfigError,
    AudioRewardError,
    InvalidSpeechSampleError,
    InvalidWaveformError,
    RemoteScorerError,
    RewardError,
    RewardWorkerError,
    ScorerOutputError,
    ScorerRegistrationError,
    UnknownAudioRewardError,
    UnknownDataSourceError,
)
from omni_rewards.http_client import HttpScorerClient, HttpScorerConfig, ScoreRequest
from omni_rewards.manager import RewardManager, RewardManagerConfig
from omni_rewards.outcomes import BatchResult, SampleOutcome
from omni_rewards.registry import SCORERS, Scorer, ScorerRegistry

__all__ = [
    "AUDIO_SCORERS",
    "SCORERS",
    "AudioRewardConfigError",
    "AudioRewardError",
    "AudioRewardSpec",
    "AudioScoreRequest",
    "AudioScorer",
    "BatchResult",
    "HttpScorerClient",
    "HttpScorerConfig",
    "InvalidSpeechSampleError",
    "InvalidWaveformError",
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
    "SpeechSample",
    "UnknownAudioRewardError",
    "UnknownDataSourceError",
    "WeightedAudioReward",
    "compute_score",
    "normalise_output",
]
