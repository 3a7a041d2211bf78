"""Rollout-vs-actor consistency: do the sampler and the trainer agree on the policy?

After each weight sync the rollout engine's log-probs of the sampled tokens should match
the actor's recomputation. Two numbers, under verl's metric names:

- ``training/rollout_actor_probs_pearson_corr``: Pearson correlation of token
  probabilities over the masked tokens (healthy: > 0.995);
- ``rollout_corr/log_ppl_diff``: mean over sequences of (rollout minus actor) masked-mean
  log-prob (healthy: about 0).
"""

from __future__ import annotations

import torch
from torch import Tensor

from omni_training.masked import masked_mean


def rollout_actor_consistency(
    rollout_log_probs: Tensor,  # [B, T]
    actor_log_probs: Tensor,  # [B, T]
    response_mask: Tensor,  # [B, T]
) -> dict[str, float]:
    """The two consistency metrics; NaN Pearson when fewer than two tokens or no variance."""
    mask = response_mask.bool()
    rollout_p = rollout_log_probs.detach().double()[mask].exp()
    actor_p = actor_log_probs.detach().double()[mask].exp()
    pearson = float("nan")
    if rollout_p.numel() >= 2:
        stacked = torch.stack([rollout_p, actor_p])
        if bool((stacked.std(dim=1) > 0).all()):
            pearson = float(torch.corrcoef(stacked)[0, 1])
    rows = response_mask.sum(dim=-1) > 0
    per_sequence = masked_mean(rollout_log_probs.double() - actor_log_probs.double(), response_mask.double(), dim=-1)
    log_ppl_diff = float(per_sequence[rows].mean()) if bool(rows.any()) else float("nan")
    return {
        "training/rollout_actor_probs_pearson_corr": pearson,
        "rollout_corr/log_ppl_diff": log_ppl_diff,
    }
