"""Worked examples and error messages; verl parity lives in test_parity_with_verl.py."""

from __future__ import annotations

import math

import pytest
import torch

from omni_training.advantages import AdvantageConfig, get_advantage_estimator
from omni_training.aggregation import aggregate_loss
from omni_training.kl import entropy_from_logits, kl_estimate, kl_penalized_rewards
from omni_training.policy_loss import BatchCounts, PolicyLossConfig, get_policy_loss


def test_grpo_worked_example() -> None:
    # Group "a" scores 1, 0, 1: mean 2/3, unbiased std sqrt(1/3) = 0.57735.
    # Advantages: (1 - 2/3)/0.57735 = 0.57735 and (0 - 2/3)/0.57735 = -1.1547.
    # Group "b" is a singleton: mean 0, std 1, so its advantage is its score, 1.
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    out = get_advantage_estimator("grpo")(
        token_level_rewards=rewards, response_mask=mask, index=["a", "a", "a", "b"], config=AdvantageConfig()
    )
    expected = torch.tensor([[0.57735, 0.57735], [-1.1547, -1.1547], [0.57735, 0.0], [1.0, 0.0]])
    torch.testing.assert_close(out.advantages, expected, atol=1e-4, rtol=0)


def test_rloo_worked_example() -> None:
    # Scores 3, 1, 2 (mean 2): leave-one-out advantage = 3/2 * (score - 2) = 1.5, -1.5, 0.
    rewards = torch.tensor([[3.0], [1.0], [2.0]])
    out = get_advantage_estimator("rloo")(
        token_level_rewards=rewards, response_mask=torch.ones(3, 1), index=[7, 7, 7], config=AdvantageConfig()
    )
    assert out.advantages.squeeze(-1).tolist() == pytest.approx([1.5, -1.5, 0.0])


def test_index_length_must_match() -> None:
    with pytest.raises(ValueError, match=r"index has 2 group ids for 3 samples"):
        get_advantage_estimator("grpo")(
            token_level_rewards=torch.ones(3, 1), response_mask=torch.ones(3, 1), index=[0, 0],
            config=AdvantageConfig(),
        )


def test_passk_refuses_singleton_groups() -> None:
    with pytest.raises(ValueError, match=r"at least two samples per group .* sizes \[1, 2\]"):
        get_advantage_estimator("grpo_passk")(
            token_level_rewards=torch.ones(3, 1), response_mask=torch.ones(3, 1), index=[0, 0, 1],
            config=AdvantageConfig(),
        )


def test_unknown_names_list_the_registered_ones() -> None:
    with pytest.raises(ValueError, match=r"Unknown policy loss_mode 'ppo'; registered: cispo, gspo, sapo, vanilla"):
        get_policy_loss("ppo")
    with pytest.raises(ValueError, match=r"Unknown adv_estimator 'gae'; registered: grpo, grpo_passk, reinforce_plus_plus"):
        get_advantage_estimator("gae")
    with pytest.raises(ValueError, match=r"Unknown loss_agg_mode 'mean'; valid: token-mean, token-sum"):
        aggregate_loss(torch.ones(1, 1), torch.ones(1, 1), "mean")
    with pytest.raises(ValueError, match=r"Unknown KL estimator 'k4'; valid: kl, k1, abs"):
        kl_estimate(torch.zeros(1), torch.zeros(1), "k4")
    with pytest.raises(ValueError, match=r"clip_ratio_c must be > 1"):
        PolicyLossConfig(clip_ratio_c=1.0, loss_agg_mode="token-mean")


def test_micro_batch_losses_add_up_to_the_mini_batch_loss() -> None:
    g = torch.Generator().manual_seed(0)
    old, new, advantages = (torch.randn(6, 5, generator=g) for _ in range(3))
    mask = (torch.rand(6, 5, generator=g) > 0.3).float()
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        config = PolicyLossConfig(loss_agg_mode=mode)
        loss = get_policy_loss("gspo")
        whole = loss(old_log_prob=old, log_prob=new, advantages=advantages, response_mask=mask, config=config).loss
        counts = BatchCounts(num_tokens=mask.sum(), num_sequences=(mask.sum(-1) > 0).sum(), horizon=5)
        parts = sum(
            loss(
                old_log_prob=old[s], log_prob=new[s], advantages=advantages[s], response_mask=mask[s],
                config=config, counts=counts,
            ).loss
            for s in (slice(0, 2), slice(2, 6))
        )
        torch.testing.assert_close(parts, whole)


def test_kl_penalty_and_entropy() -> None:
    # k1 of log-probs -1 vs ref -2 is 1 per token; with coef 0.1 each reward drops by 0.1.
    scores = torch.tensor([[0.0, 1.0]])
    rewards, mean_kl = kl_penalized_rewards(
        scores, torch.full((1, 2), -1.0), torch.full((1, 2), -2.0), torch.ones(1, 2), coef=0.1
    )
    torch.testing.assert_close(rewards, torch.tensor([[-0.1, 0.9]]))
    assert mean_kl.item() == pytest.approx(1.0)
    uniform = torch.zeros(2, 3, 8)  # entropy of a uniform distribution over 8 is log 8
    torch.testing.assert_close(entropy_from_logits(uniform), torch.full((2, 3), math.log(8)))
