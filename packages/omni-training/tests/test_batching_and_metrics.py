from __future__ import annotations

import math

import pytest
import torch

from omni_training.batching import collate, plan_micro_batches
from omni_training.consistency import pearson_undefined_reason, rollout_actor_consistency
from omni_training.metrics import length_metrics


def test_collate_lays_out_prompt_left_and_response_right() -> None:
    prompts = [
        {"input_ids": torch.tensor([[5, 6, 7]]), "attention_mask": torch.ones(1, 3, dtype=torch.long),
         "pixel_values": torch.ones(4, 2), "image_grid_thw": torch.tensor([[1, 2, 2]])},
        {"input_ids": torch.tensor([[8]]), "attention_mask": torch.ones(1, 1, dtype=torch.long)},
    ]
    inputs, responses, mask = collate(prompts, [[9], [10, 11]], pad_token_id=0)
    assert inputs["input_ids"].tolist() == [[5, 6, 7, 9, 0], [0, 0, 8, 10, 11]]
    assert inputs["attention_mask"].tolist() == [[1, 1, 1, 1, 0], [0, 0, 1, 1, 1]]
    assert responses.tolist() == [[9, 0], [10, 11]] and mask.tolist() == [[1, 0], [1, 1]]
    assert inputs["pixel_values"].shape == (4, 2) and inputs["image_grid_thw"].tolist() == [[1, 2, 2]]


def test_collate_extends_mrope_positions_and_pads_audio_time() -> None:
    prompts = [
        {"input_ids": torch.tensor([[5, 6]]), "attention_mask": torch.ones(1, 2, dtype=torch.long),
         "position_ids": torch.tensor([[[0, 1]], [[0, 3]], [[0, 4]]]),
         "input_features": torch.ones(1, 3, 5), "feature_attention_mask": torch.ones(1, 5)},
        {"input_ids": torch.tensor([[7]]), "attention_mask": torch.ones(1, 1, dtype=torch.long),
         "position_ids": torch.tensor([[[0]], [[0]], [[0]]]),
         "input_features": torch.ones(1, 3, 2), "feature_attention_mask": torch.ones(1, 2)},
    ]
    inputs, _, _ = collate(prompts, [[1, 2], [3]], pad_token_id=0)
    # Each response continues from its own prompt's last position, in all three components.
    assert inputs["position_ids"][:, 0].tolist() == [[0, 1, 2, 3], [0, 3, 4, 5], [0, 4, 5, 6]]
    assert inputs["position_ids"][:, 1].tolist() == [[1, 0, 1, 2]] * 3
    assert inputs["input_features"].shape == (2, 3, 5)
    assert inputs["feature_attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]


def test_collate_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match=r"2 prompts, 1 responses"):
        collate([{}, {}], [[1]], pad_token_id=0)
    with pytest.raises(ValueError, match=r"Prompt 0 lacks \['attention_mask'\]"):
        collate([{"input_ids": torch.tensor([[1]])}], [[1]], pad_token_id=0)


def test_plan_micro_batches() -> None:
    # Budget 12 padded tokens: [5, 5] fits (2 x 5 = 10), adding 3 would make 3 x 5 = 15.
    assert plan_micro_batches([5, 5, 3, 3, 3, 20], max_tokens=12, max_rows=None) == [[0, 1], [2, 3, 4], [5]]
    assert plan_micro_batches([1] * 5, max_tokens=None, max_rows=2) == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError, match="needs max_tokens, max_rows"):
        plan_micro_batches([1], max_tokens=None, max_rows=None)


def test_consistency_metrics() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.9], [0.1, 0.6, 0.3]]))
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    same = rollout_actor_consistency(logp, logp, mask)
    assert same["training/rollout_actor_probs_pearson_corr"] == pytest.approx(1.0)
    assert same["rollout_corr/log_ppl_diff"] == 0.0
    shifted = rollout_actor_consistency(logp + 0.1, logp, mask)  # rollout 0.1 nat more confident
    assert shifted["rollout_corr/log_ppl_diff"] == pytest.approx(0.1)
    assert math.isnan(rollout_actor_consistency(logp, logp, torch.zeros_like(mask))["rollout_corr/log_ppl_diff"])
    assert same["training/rollout_actor_probs_tokens"] == 5.0 and pearson_undefined_reason(same) is None


def test_an_undefined_pearson_stays_nan_and_says_why() -> None:
    """The step line printed ``pearson nan``; now it says why (reporting.pearson_text)."""
    sure = torch.zeros(2, 3)  # log-prob 0: probability 1 for every token, so no variance
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    flat = rollout_actor_consistency(sure, sure, mask)
    assert math.isnan(flat["training/rollout_actor_probs_pearson_corr"])  # as verl logs it
    assert flat["training/rollout_actor_probs_tokens"] == 3
    assert pearson_undefined_reason(flat) == "no variance"
    one = rollout_actor_consistency(torch.log(torch.tensor([[0.5, 0.2]])), sure[:1, :2], torch.tensor([[1, 0]]))
    assert math.isnan(one["training/rollout_actor_probs_pearson_corr"]) and pearson_undefined_reason(one) == "<2 tokens"
    broken = rollout_actor_consistency(torch.full((2, 3), float("nan")), sure, mask)
    assert pearson_undefined_reason(broken) == "non-finite log-probs"
    # Not measured here (a verl run's metrics carry no token count): no reason is made up.
    assert pearson_undefined_reason({"training/rollout_actor_probs_pearson_corr": float("nan")}) is None


def test_length_metrics() -> None:
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    metrics = length_metrics(mask, torch.ones(2, 5), max_response_length=4)
    assert metrics == {
        "response_length/mean": 3.5, "response_length/max": 4.0, "response_length/min": 3.0,
        "response_length/clip_ratio": 0.5, "prompt_length/mean": 5.0, "prompt_length/max": 5.0,
    }
