"""A speech sample's reward in verl's agent loop: scored or failed, always the same keys, a
failure counted and never a silent 0 (no verl needed)."""

from __future__ import annotations

import numpy as np
import pytest

from omni_rewards.audio import WeightedAudioReward
from omni_verl.speech_reward import score_speech, unscored_speech

RATE = 16_000


@pytest.fixture
def rewards() -> WeightedAudioReward:
    return WeightedAudioReward([{"name": "duration", "weight": 1.0}, {"name": "silence", "weight": 0.5}])


def tone(seconds: float) -> np.ndarray:
    return (0.3 * np.sin(np.arange(int(seconds * RATE)) * 2 * np.pi * 220 / RATE)).astype(np.float32)


def test_a_scored_sample_reports_each_reward(rewards: WeightedAudioReward) -> None:
    score, info = score_speech(rewards, tone(1.2), RATE, "three apples", "")
    expected = rewards(tone(1.2), RATE, "three apples", "")
    assert score == pytest.approx(expected["score"]) and score > 0
    assert info["audio_reward/duration"] == pytest.approx(expected["audio_reward/duration"])
    assert (info["reward_ok"], info["reward_error"]) == (1.0, 0.0)


@pytest.mark.parametrize(
    ("waveform", "rate", "text"),
    [(None, None, "three apples"), (np.full(800, np.nan, dtype=np.float32), RATE, "three apples"),
     (tone(1.0), RATE, "")],
    ids=["no-waveform", "nan-waveform", "no-words"],
)
def test_a_failed_sample_scores_zero_and_is_counted(
    rewards: WeightedAudioReward, waveform: np.ndarray | None, rate: int | None, text: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # at WARNING: importing vLLM's server (its model_hosting_container_standards) sets the root logger to ERROR
    caplog.set_level("WARNING", logger="omni_verl.speech_reward")
    score, info = score_speech(rewards, waveform, rate, text, None)
    assert score == 0.0 and (info["reward_ok"], info["reward_error"]) == (0.0, 1.0)
    assert "speech reward failed" in caplog.text


def test_every_status_reports_the_same_keys(rewards: WeightedAudioReward) -> None:
    keys = set(score_speech(rewards, tone(1.0), RATE, "three apples", None)[1])
    assert keys == set(score_speech(rewards, None, None, "x", None)[1])
    assert unscored_speech(rewards, "error") == (0.0, {"audio_reward/duration": 0.0, "audio_reward/silence": 0.0,
                                                        "reward_ok": 0.0, "reward_error": 1.0})
