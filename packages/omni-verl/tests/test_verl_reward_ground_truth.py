"""verl's reward function hands the scorer the row's ground truth as the row holds it: AudioMCQ's
answer with its choices arrives as the mapping (its lists as numpy arrays, as verl's batch holds
them), not as Python's text of it."""

from __future__ import annotations

import numpy as np

from omni_rewards.api import as_ground_truth, ground_truth_text
from omni_verl import reward

AUDIO_MCQ = "Harland/AudioMCQ-StrongAC-GeminiCoT"
TRUTH = {"answer": "a car horn", "choices": np.array(["a dog barking", "a car horn", "rain"]),
         "correct_choice_index": np.int64(1), "correct_choice_indices": np.array([1])}


def test_a_mapping_ground_truth_reaches_the_scorer_whole() -> None:
    for response, score in (("<answer>B</answer>", 1.0), ("<answer>a car horn</answer>", 1.0),
                            ("<answer>A</answer>", 0.0)):
        result = reward.compute_score(AUDIO_MCQ, response, TRUTH, {"index": 0}, num_workers=1)
        assert result["score"] == score and result["reward_ok"] == 1.0, (response, result)


def test_text_stays_text_and_logs_show_a_mapping_as_json() -> None:
    assert as_ground_truth(4) == "4" and as_ground_truth("B") == "B" and as_ground_truth(TRUTH) is TRUTH
    assert ground_truth_text(TRUTH) == (
        '{"answer": "a car horn", "choices": ["a dog barking", "a car horn", "rain"], "correct_choice_index": 1, '
        '"correct_choice_indices": [1]}'
    )
