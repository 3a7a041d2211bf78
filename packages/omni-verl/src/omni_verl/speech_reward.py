"""A speech sample's reward in verl's agent loop: the run's audio rewards on the waveform the
rollout server returned (:mod:`omni_rollout.speech_sample`), with a fixed key set per sample and
a failure counted as ``reward_error``, never a silent 0.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from omni_rewards.audio import WeightedAudioReward
from omni_rewards.errors import AudioRewardError, InvalidSpeechSampleError, InvalidWaveformError

logger = logging.getLogger(__name__)

SPEECH_STATUSES = ("ok", "error")


def score_speech(
    rewards: WeightedAudioReward, waveform: Any, sample_rate: int | None, text: str, ground_truth: str | None
) -> tuple[float, dict[str, float]]:
    """One sample's reward and its extra info, with a fixed key set (every sample of a batch
    reports the same keys, see :func:`unscored_speech`): ``audio_reward/<key>`` per reward and
    the ``reward_<status>`` indicators. A sample without a waveform, with one that cannot be
    scored, or on which a reward fails scores 0 with ``reward_error`` 1 (counted, and
    logged), never a silent 0."""
    try:
        if waveform is None or sample_rate is None:
            raise InvalidWaveformError("the engine returned no waveform for this sample")
        result = rewards(np.asarray(waveform, dtype=np.float32), int(sample_rate), text, ground_truth)
    except (InvalidSpeechSampleError, AudioRewardError) as exc:
        logger.warning("speech reward failed: %s", exc)
        return unscored_speech(rewards, "error")
    score, info = unscored_speech(rewards, "ok")
    return float(result["score"]), {name: float(result.get(name, value)) for name, value in info.items()}


def unscored_speech(rewards: WeightedAudioReward, status: str) -> tuple[float, dict[str, float]]:
    """Score 0 and the extra info of a sample with ``status`` (``"error"``; ``"ok"`` gives the
    key set with zeros)."""
    info = {f"audio_reward/{key}": 0.0 for key in rewards.keys}
    info.update({f"reward_{name}": float(name == status) for name in SPEECH_STATUSES})
    return 0.0, info
