"""Outcome advantage estimators, selected by ``algorithm.adv_estimator``.

Inputs are per-token rewards ``[B, T]`` (an outcome reward sits on one token; its row sum is
the sequence score), the response mask, and ``index``: a group id per sample (samples of
one prompt share it). Groups are handled with tensor ops, not Python loops over samples.

- ``grpo``: ``(score - group mean) / (group std + eps)``; the std is unbiased; without
  ``norm_adv_by_std_in_grpo`` only the mean is removed (Dr.GRPO). A singleton group has
  mean 0 and std 1 (its advantage is its score), as in verl.
- ``rloo``: leave-one-out baseline, ``n/(n-1) * (score - mean)``; singletons keep their score.
- ``reinforce_plus_plus``: discounted returns, whitened over the batch.
- ``reinforce_plus_plus_baseline``: score minus group mean, whitened over the batch.
- ``grpo_passk``: only each group's best sample gets ``best - second best`` (optionally
  divided by the group std); groups need at least two samples.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from omni_contracts import Registry
from omni_training.masked import masked_whiten


@dataclass(frozen=True)
class AdvantageConfig:
    """``algorithm.*`` settings the estimators read."""

    norm_adv_by_std_in_grpo: bool = True
    gamma: float = 1.0
    epsilon: float = 1e-6


@dataclass(frozen=True)
class AdvantageOutput:
    advantages: Tensor  # [B, T], zero outside the mask
    returns: Tensor  # [B, T]


class AdvantageFn(Protocol):
    def __call__(
        self,
        *,
        token_level_rewards: Tensor,
        response_mask: Tensor,
        index: Sequence[Hashable],
        config: AdvantageConfig,
    ) -> AdvantageOutput: ...


ADVANTAGE_ESTIMATORS: Registry[str, AdvantageFn] = Registry("adv_estimator")


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Decorator: register an estimator as ``algorithm.adv_estimator=name``."""
    return ADVANTAGE_ESTIMATORS.register(name)


def get_advantage_estimator(name: str) -> AdvantageFn:
    """The estimator registered as ``name``; a miss lists the registered ones (``UnknownNameError``,
    a ``ValueError``)."""
    return ADVANTAGE_ESTIMATORS.get(name)


@dataclass(frozen=True)
class _Groups:
    ids: Tensor  # [B] group number of each sample
    sizes: Tensor  # [G]
    count: int

    @classmethod
    def of(cls, index: Sequence[Hashable], device: torch.device) -> _Groups:
        numbering: dict[Hashable, int] = {}
        ids = torch.tensor([numbering.setdefault(key, len(numbering)) for key in index], device=device)
        sizes = torch.bincount(ids, minlength=len(numbering))
        return cls(ids, sizes, len(numbering))

    def sum(self, values: Tensor) -> Tensor:  # [B] -> [G]
        return torch.zeros(self.count, dtype=values.dtype, device=values.device).index_add_(0, self.ids, values)

    def mean(self, values: Tensor) -> Tensor:  # [B] -> [G]
        return self.sum(values) / self.sizes.to(values.dtype)

    def unbiased_std(self, values: Tensor) -> Tensor:  # [B] -> [G]; NaN for singletons
        centered = values - self.mean(values)[self.ids]
        return torch.sqrt(self.sum(centered.square()) / (self.sizes.to(values.dtype) - 1))


def _scores(token_level_rewards: Tensor, index: Sequence[Hashable]) -> Tensor:
    if len(index) != token_level_rewards.shape[0]:
        raise ValueError(
            f"index has {len(index)} group ids for {token_level_rewards.shape[0]} samples; "
            "give one id per sample."
        )
    return token_level_rewards.sum(dim=-1)


@register_advantage("grpo")
def grpo_advantage(
    *, token_level_rewards: Tensor, response_mask: Tensor, index: Sequence[Hashable], config: AdvantageConfig
) -> AdvantageOutput:
    with torch.no_grad():
        scores = _scores(token_level_rewards, index)
        groups = _Groups.of(index, scores.device)
        singleton = groups.sizes == 1
        mean = torch.where(singleton, 0.0, groups.mean(scores))
        centered = scores - mean[groups.ids]
        if config.norm_adv_by_std_in_grpo:
            std = torch.where(singleton, 1.0, groups.unbiased_std(scores))
            centered = centered / (std[groups.ids] + config.epsilon)
        advantages = centered.unsqueeze(-1) * response_mask
    return AdvantageOutput(advantages, advantages)


@register_advantage("rloo")
def rloo_advantage(
    *, token_level_rewards: Tensor, response_mask: Tensor, index: Sequence[Hashable], config: AdvantageConfig
) -> AdvantageOutput:
    with torch.no_grad():
        scores = _scores(token_level_rewards, index)
        groups = _Groups.of(index, scores.device)
        n = groups.sizes.to(scores.dtype)[groups.ids]
        mean = groups.mean(scores)[groups.ids]
        loo = torch.where(n > 1, scores * n / (n - 1) - mean * n / (n - 1), scores)
        advantages = loo.unsqueeze(-1) * response_mask
    return AdvantageOutput(advantages, advantages)


@register_advantage("reinforce_plus_plus")
def reinforce_plus_plus_advantage(
    *, token_level_rewards: Tensor, response_mask: Tensor, index: Sequence[Hashable], config: AdvantageConfig
) -> AdvantageOutput:
    with torch.no_grad():
        returns = torch.zeros_like(token_level_rewards)
        running = torch.zeros_like(token_level_rewards[:, 0])
        mask = response_mask.to(token_level_rewards.dtype)
        for t in reversed(range(token_level_rewards.shape[1])):
            updated = token_level_rewards[:, t] + config.gamma * running
            returns[:, t] = updated * mask[:, t]
            # Tokens outside the mask (tool output, observations) pass the return through.
            running = updated * mask[:, t] + running * (1 - mask[:, t])
        advantages = masked_whiten(returns, response_mask) * response_mask
    return AdvantageOutput(advantages, returns)


@register_advantage("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline_advantage(
    *, token_level_rewards: Tensor, response_mask: Tensor, index: Sequence[Hashable], config: AdvantageConfig
) -> AdvantageOutput:
    with torch.no_grad():
        scores = _scores(token_level_rewards, index)
        groups = _Groups.of(index, scores.device)
        mean = torch.where(groups.sizes == 1, 0.0, groups.mean(scores))
        centered = (scores - mean[groups.ids]).unsqueeze(-1) * response_mask
        advantages = masked_whiten(centered, response_mask) * response_mask
    return AdvantageOutput(advantages, advantages)


@register_advantage("grpo_passk")
def grpo_passk_advantage(
    *, token_level_rewards: Tensor, response_mask: Tensor, index: Sequence[Hashable], config: AdvantageConfig
) -> AdvantageOutput:
    with torch.no_grad():
        scores = _scores(token_level_rewards, index)
        groups = _Groups.of(index, scores.device)
        if bool((groups.sizes < 2).any()):
            raise ValueError(
                "grpo_passk needs at least two samples per group (rollout.n >= 2); got groups of "
                f"sizes {sorted(set(groups.sizes.tolist()))}."
            )
        advantages = torch.zeros_like(scores)
        std = groups.unbiased_std(scores)
        for group in range(groups.count):
            members = torch.nonzero(groups.ids == group).squeeze(-1)
            top, order = torch.topk(scores[members], 2)
            gap = top[0] - top[1]
            if config.norm_adv_by_std_in_grpo:
                gap = gap / (std[group] + config.epsilon)
            advantages[members[order[0]]] = gap
        advantages = advantages.unsqueeze(-1) * response_mask
    return AdvantageOutput(advantages, advantages)
