"""Policy losses, selected by ``actor_rollout_ref.actor.policy_loss.loss_mode``.

Each loss is a pure function of keyword-only tensors, registered under verl's name:

- ``vanilla``: PPO's clipped token-ratio objective with dual clip (``clip_ratio_c``) for
  negative advantages. DAPO's clip-higher is this loss with ``clip_ratio_high`` above
  ``clip_ratio_low``.
- ``gspo``: the sequence-level ratio ``exp(mean_t log(pi/pi_old))`` (GSPO,
  https://arxiv.org/abs/2507.18071); each token's ratio carries that value forward and its
  own token's gradient backward, clipped by ``clip_ratio_low/high``.
- ``sapo``: a smooth sigmoid gate of the token ratio instead of a hard clip
  (https://arxiv.org/abs/2511.20347), always aggregated ``seq-mean-token-mean``.
- ``cispo``: a clipped, stop-gradient ratio times ``A * log pi`` (https://arxiv.org/abs/2506.13585).

Each takes ``rollout_is_weights`` (rollout correction's importance weights), which multiply the
per-token loss before aggregation, as verl applies them. :func:`reinforce_loss` is rollout
correction's bypass ``loss_type=reinforce``, not a ``loss_mode``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from omni_contracts import Registry
from omni_training.aggregation import aggregate_loss
from omni_training.masked import masked_mean

LOG_RATIO_CLAMP = 20.0


@dataclass(frozen=True)
class PolicyLossConfig:
    """The actor settings the losses read (verl's names under ``actor_rollout_ref.actor``)."""

    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = field(kw_only=True)
    # The constant ``seq-mean-token-sum-norm`` (Dr.GRPO) divides by; None: the longest response
    # of the mini-batch. The trainer sets the run's response limit, as it gives verl (verl's name).
    loss_scale_factor: int | None = None
    tau_pos: float = 1.0
    tau_neg: float = 1.05

    def __post_init__(self) -> None:
        if self.clip_ratio_c <= 1.0:
            raise ValueError(
                f"clip_ratio_c must be > 1 (the dual-clip lower bound on the ratio), got {self.clip_ratio_c}."
            )

    @property
    def low(self) -> float:
        return self.clip_ratio if self.clip_ratio_low is None else self.clip_ratio_low

    @property
    def high(self) -> float:
        return self.clip_ratio if self.clip_ratio_high is None else self.clip_ratio_high


@dataclass(frozen=True)
class BatchCounts:
    """Mini-batch totals, so micro-batch losses sum to the mini-batch loss under accumulation."""

    num_tokens: Tensor | float | None = None
    num_sequences: Tensor | float | None = None
    horizon: float | None = None


@dataclass(frozen=True)
class PolicyLossOutput:
    loss: Tensor  # scalar, differentiable
    clipfrac: Tensor  # share of tokens whose clipped term was active
    clipfrac_lower: Tensor  # share of negative-advantage tokens held by the dual clip
    ppo_kl: Tensor  # masked mean of log(pi_old / pi)


class PolicyLossFn(Protocol):
    def __call__(
        self,
        *,
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        config: PolicyLossConfig,
        counts: BatchCounts = ...,
        rollout_is_weights: Tensor | None = ...,
    ) -> PolicyLossOutput: ...


POLICY_LOSSES: Registry[str, PolicyLossFn] = Registry("policy loss_mode")


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: register a policy loss as ``actor.policy_loss.loss_mode=name``."""
    return POLICY_LOSSES.register(name)


def get_policy_loss(name: str) -> PolicyLossFn:
    """The loss registered as ``name``; a miss lists the registered ones (``UnknownNameError``,
    a ``ValueError``)."""
    return POLICY_LOSSES.get(name)


def _aggregate(loss_mat: Tensor, mask: Tensor, mode: str, counts: BatchCounts, weights: Tensor | None) -> Tensor:
    """The per-token losses, times the rollout-correction weights if any, aggregated."""
    if weights is not None:
        loss_mat = loss_mat * weights
    return aggregate_loss(
        loss_mat, mask, mode,
        num_tokens=counts.num_tokens, num_sequences=counts.num_sequences, horizon=counts.horizon,
    )


@register_policy_loss("vanilla")
def vanilla_loss(
    *,
    old_log_prob: Tensor,  # [B, T]
    log_prob: Tensor,  # [B, T]
    advantages: Tensor,  # [B, T]
    response_mask: Tensor,  # [B, T]
    config: PolicyLossConfig,
    counts: BatchCounts = BatchCounts(),
    rollout_is_weights: Tensor | None = None,  # [B, T]
) -> PolicyLossOutput:
    log_ratio = torch.clamp(log_prob - old_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - config.low, 1 + config.high)
    pessimistic = torch.maximum(unclipped, clipped)
    dual_bound = -advantages * config.clip_ratio_c
    dual_clipped = torch.minimum(dual_bound, pessimistic)
    per_token = torch.where(advantages < 0, dual_clipped, pessimistic)
    return PolicyLossOutput(
        loss=_aggregate(per_token, response_mask, config.loss_agg_mode, counts, rollout_is_weights),
        clipfrac=masked_mean((clipped > unclipped).float(), response_mask),
        clipfrac_lower=masked_mean(((pessimistic > dual_bound) & (advantages < 0)).float(), response_mask),
        ppo_kl=masked_mean(-log_ratio, response_mask),
    )


@register_policy_loss("gspo")
def gspo_loss(
    *,
    old_log_prob: Tensor,  # [B, T]
    log_prob: Tensor,  # [B, T]
    advantages: Tensor,  # [B, T]
    response_mask: Tensor,  # [B, T]
    config: PolicyLossConfig,
    counts: BatchCounts = BatchCounts(),
    rollout_is_weights: Tensor | None = None,  # [B, T]
) -> PolicyLossOutput:
    log_ratio = log_prob - old_log_prob
    lengths = response_mask.sum(dim=-1).clamp(min=1)
    seq_log_ratio = (log_ratio * response_mask).sum(dim=-1) / lengths  # [B]
    # Value: the sequence ratio. Gradient: the token's own log-prob (stop-gradient elsewhere).
    token_log_ratio = log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(torch.clamp(token_log_ratio, max=10.0))
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - config.low, 1 + config.high)
    per_token = torch.maximum(unclipped, clipped)
    loss = _aggregate(per_token, response_mask, config.loss_agg_mode, counts, rollout_is_weights)
    return PolicyLossOutput(
        loss=loss,
        clipfrac=masked_mean((clipped > unclipped).float(), response_mask),
        clipfrac_lower=torch.zeros((), device=loss.device),
        ppo_kl=masked_mean(-log_ratio, response_mask),
    )


@register_policy_loss("sapo")
def sapo_loss(
    *,
    old_log_prob: Tensor,  # [B, T]
    log_prob: Tensor,  # [B, T]
    advantages: Tensor,  # [B, T]
    response_mask: Tensor,  # [B, T]
    config: PolicyLossConfig,
    counts: BatchCounts = BatchCounts(),
    rollout_is_weights: Tensor | None = None,  # [B, T]
) -> PolicyLossOutput:
    log_ratio = torch.clamp(log_prob - old_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    tau = torch.where(
        advantages > 0,
        torch.as_tensor(config.tau_pos, dtype=advantages.dtype),
        torch.as_tensor(config.tau_neg, dtype=advantages.dtype),
    )
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    loss = _aggregate(-gate * advantages, response_mask, "seq-mean-token-mean", counts, rollout_is_weights)
    zero = torch.zeros((), device=loss.device)
    return PolicyLossOutput(loss=loss, clipfrac=zero, clipfrac_lower=zero, ppo_kl=masked_mean(-log_ratio, response_mask))


@register_policy_loss("cispo")
def cispo_loss(
    *,
    old_log_prob: Tensor,  # [B, T]
    log_prob: Tensor,  # [B, T]
    advantages: Tensor,  # [B, T]
    response_mask: Tensor,  # [B, T]
    config: PolicyLossConfig,
    counts: BatchCounts = BatchCounts(),
    rollout_is_weights: Tensor | None = None,  # [B, T]
) -> PolicyLossOutput:
    log_ratio = torch.clamp(log_prob - old_log_prob, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    weight = torch.clamp(ratio, 1 - config.low, 1 + config.high)
    per_token = -weight.detach() * advantages * log_prob
    loss = _aggregate(per_token, response_mask, config.loss_agg_mode, counts, rollout_is_weights)
    return PolicyLossOutput(
        loss=loss,
        clipfrac=masked_mean((ratio != weight).float(), response_mask),
        clipfrac_lower=torch.zeros((), device=loss.device),
        ppo_kl=masked_mean(-log_ratio, response_mask),
    )


def reinforce_loss(
    *,
    rollout_log_prob: Tensor,  # [B, T]
    log_prob: Tensor,  # [B, T]
    advantages: Tensor,  # [B, T]
    response_mask: Tensor,  # [B, T]
    config: PolicyLossConfig,
    counts: BatchCounts = BatchCounts(),
    rollout_is_weights: Tensor | None = None,  # [B, T]
) -> PolicyLossOutput:
    """``-w * A * log pi`` with no ratio and no clip: the policy gradient of samples drawn by
    the rollout, reweighted by rollout correction's weights ``w`` (verl's bypass-mode
    ``loss_type=reinforce``). ``ppo_kl`` measures the current policy against the rollout."""
    per_token = -advantages * log_prob
    loss = _aggregate(per_token, response_mask, config.loss_agg_mode, counts, rollout_is_weights)
    zero = torch.zeros((), device=loss.device)
    return PolicyLossOutput(
        loss=loss, clipfrac=zero, clipfrac_lower=zero, ppo_kl=masked_mean(rollout_log_prob - log_prob, response_mask)
    )
