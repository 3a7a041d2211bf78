"""Values and gradients of every loss, aggregation mode, estimator and KL estimator equal
verl's ``core_algos`` on randomized batches (ragged masks, singleton groups, several seeds)."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
import torch

from omni_training import advantages as adv
from omni_training.aggregation import LOSS_AGG_MODES, aggregate_loss
from omni_training.kl import kl_estimate
from omni_training.policy_loss import PolicyLossConfig, get_policy_loss, reinforce_loss

SEEDS = (0, 1, 2)
TOL = {"rtol": 1e-6, "atol": 1e-6}


def ragged_mask(generator: torch.Generator, batch: int, length: int) -> torch.Tensor:
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    lengths[0] = length  # one full row
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).float()
    mask[-1, 2:4] = 0.0  # a hole, as tool output leaves
    return mask


def batch(seed: int, b: int = 12, t: int = 9) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "old": torch.randn(b, t, generator=g, dtype=torch.float64) * 0.5 - 1.0,
        "new": torch.randn(b, t, generator=g, dtype=torch.float64) * 0.5 - 1.0,
        "adv": torch.randn(b, t, generator=g, dtype=torch.float64),
        "mask": ragged_mask(g, b, t).double(),
    }


def verl_actor_config(**overrides: object) -> object:
    from verl.workers.config.actor import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, **overrides)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_aggregation(verl_core_algos: ModuleType, seed: int, mode: str) -> None:
    data = batch(seed)
    data["mask"][3] = 0.0  # a fully masked sequence does not count as a sequence
    ours = aggregate_loss(data["adv"], data["mask"], mode)
    theirs = verl_core_algos.agg_loss(loss_mat=data["adv"], loss_mask=data["mask"], loss_agg_mode=mode)
    torch.testing.assert_close(ours, theirs, **TOL)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("agg", LOSS_AGG_MODES)
@pytest.mark.parametrize(
    ("loss_mode", "clip"),
    [
        ("vanilla", {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2}),
        ("vanilla", {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 2.5}),  # DAPO
        ("gspo", {"clip_ratio_low": 3e-4, "clip_ratio_high": 4e-4}),
        ("gspo", {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2}),
        ("sapo", {"tau_pos": 1.0, "tau_neg": 1.05}),
        ("cispo", {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28}),
    ],
)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "rollout_is_weights"])
def test_policy_losses(
    verl_core_algos: ModuleType, seed: int, agg: str, loss_mode: str, clip: dict[str, float], weighted: bool
) -> None:
    data = batch(seed)
    ours_new = data["new"].clone().requires_grad_(True)
    theirs_new = data["new"].clone().requires_grad_(True)
    config = PolicyLossConfig(loss_agg_mode=agg, **clip)
    weights = torch.rand(data["mask"].shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2
    given = {"rollout_is_weights": weights} if weighted else {}
    ours = get_policy_loss(loss_mode)(
        old_log_prob=data["old"], log_prob=ours_new, advantages=data["adv"],
        response_mask=data["mask"], config=config, **given,
    )
    verl_loss = verl_core_algos.get_policy_loss_fn(loss_mode)
    theirs, metrics = verl_loss(
        old_log_prob=data["old"], log_prob=theirs_new, advantages=data["adv"],
        response_mask=data["mask"], loss_agg_mode=agg, config=verl_actor_config(loss_agg_mode=agg, **clip), **given,
    )
    torch.testing.assert_close(ours.loss, theirs, **TOL)
    ours.loss.backward()
    theirs.backward()
    torch.testing.assert_close(ours_new.grad, theirs_new.grad, **TOL)
    assert ours.clipfrac.item() == pytest.approx(metrics["actor/pg_clipfrac"], abs=1e-6)
    assert ours.ppo_kl.item() == pytest.approx(metrics["actor/ppo_kl"], abs=1e-6)
    assert ours.clipfrac_lower.item() == pytest.approx(metrics["actor/pg_clipfrac_lower"], abs=1e-6)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("agg", LOSS_AGG_MODES)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "rollout_is_weights"])
def test_the_bypass_reinforce_loss(verl_core_algos: ModuleType, seed: int, agg: str, weighted: bool) -> None:
    data = batch(seed)
    ours_new = data["new"].clone().requires_grad_(True)
    theirs_new = data["new"].clone().requires_grad_(True)
    weights = torch.rand(data["mask"].shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2
    given = weights if weighted else None
    ours = reinforce_loss(
        rollout_log_prob=data["old"], log_prob=ours_new, advantages=data["adv"], response_mask=data["mask"],
        config=PolicyLossConfig(loss_agg_mode=agg), rollout_is_weights=given,
    )
    theirs, metrics = verl_core_algos.compute_policy_loss_reinforce(
        rollout_log_prob=data["old"], log_prob=theirs_new, advantages=data["adv"], response_mask=data["mask"],
        loss_agg_mode=agg, config=verl_actor_config(loss_agg_mode=agg), rollout_is_weights=given,
    )
    torch.testing.assert_close(ours.loss, theirs, **TOL)
    ours.loss.backward()
    theirs.backward()
    torch.testing.assert_close(ours_new.grad, theirs_new.grad, **TOL)
    assert ours.ppo_kl.item() == pytest.approx(metrics["actor/ppo_kl"], abs=1e-6)


def grouped_rewards(seed: int, groups: list[int], t: int = 7) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    index = np.array([f"p{group}" for group, size in enumerate(groups) for _ in range(size)], dtype=object)
    b = len(index)
    mask = ragged_mask(g, b, t).double()
    rewards = torch.zeros(b, t, dtype=torch.float64)
    last = (mask.cumsum(-1) == mask.sum(-1, keepdim=True)) & (mask > 0)
    rewards[last] = torch.randint(0, 3, (b,), generator=g).double()  # ties are common
    permutation = torch.randperm(b, generator=g).numpy()  # groups need not be contiguous
    return rewards[permutation], mask[permutation], index[permutation]


ESTIMATOR_CASES = [
    ("grpo", {"norm_adv_by_std_in_grpo": True}),
    ("grpo", {"norm_adv_by_std_in_grpo": False}),
    ("rloo", {}),
    ("reinforce_plus_plus", {"gamma": 1.0}),
    ("reinforce_plus_plus", {"gamma": 0.9}),
    ("reinforce_plus_plus_baseline", {}),
    ("grpo_passk", {"norm_adv_by_std_in_grpo": True}),
    ("grpo_passk", {"norm_adv_by_std_in_grpo": False}),
]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("name", "settings"), ESTIMATOR_CASES)
def test_advantage_estimators(
    verl_core_algos: ModuleType, seed: int, name: str, settings: dict[str, object]
) -> None:
    from verl.trainer.config import AlgoConfig

    sizes = [4, 4, 2, 3] if name == "grpo_passk" else [4, 1, 4, 3, 1]  # singleton groups
    rewards, mask, index = grouped_rewards(seed, sizes)
    ours = adv.get_advantage_estimator(name)(
        token_level_rewards=rewards.clone(), response_mask=mask, index=list(index),
        config=adv.AdvantageConfig(**settings),  # type: ignore[arg-type]
    )
    algo = AlgoConfig(**settings)  # type: ignore[arg-type]
    verl_fn = verl_core_algos.get_adv_estimator_fn(name)
    kwargs: dict[str, object] = {"token_level_rewards": rewards.clone(), "response_mask": mask, "index": index, "config": algo}
    if name == "grpo":
        kwargs["norm_adv_by_std_in_grpo"] = settings["norm_adv_by_std_in_grpo"]
    theirs_adv, theirs_ret = verl_fn(**kwargs)
    torch.testing.assert_close(ours.advantages, theirs_adv, **TOL)
    torch.testing.assert_close(ours.returns, theirs_ret, **TOL)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k1+", "k3+", "low_var_kl+"])
def test_kl_estimators(verl_core_algos: ModuleType, seed: int, mode: str) -> None:
    data = batch(seed)
    ours_lp = data["new"].clone().requires_grad_(True)
    theirs_lp = data["new"].clone().requires_grad_(True)
    ours = kl_estimate(ours_lp, data["old"], mode)
    theirs = verl_core_algos.kl_penalty(theirs_lp, data["old"], mode)
    torch.testing.assert_close(ours, theirs, **TOL)
    (ours * data["mask"]).sum().backward()
    (theirs * data["mask"]).sum().backward()
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, **TOL)
