"""Rollout-vs-actor consistency: do the sampler and the trainer agree on the policy?

After each weight sync the rollout engine's log-probs of the sampled tokens should match
the actor's recomputation. Under verl's metric names:

- ``training/rollout_actor_probs_pearson_corr``: Pearson correlation of token
  probabilities over the masked tokens (healthy: > 0.995). NaN, as verl logs it, where it is
  undefined: fewer than two tokens, or no variance (every token's probability equal, e.g.
  all 1.0 from a policy sure of each token); :func:`pearson_undefined_reason` says which;
- ``rollout_corr/log_ppl_diff``: mean over sequences of (rollout minus actor) masked-mean
  log-prob (healthy: about 0);

and ours, ``training/rollout_actor_probs_tokens``: the masked tokens the Pearson is over.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

from omni_training.masked import masked_mean

PEARSON = "training/rollout_actor_probs_pearson_corr"
PEARSON_TOKENS = "training/rollout_actor_probs_tokens"
LOG_PPL_DIFF = "rollout_corr/log_ppl_diff"


def rollout_actor_consistency(
    rollout_log_probs: Tensor,  # [B, T]
    actor_log_probs: Tensor,  # [B, T]
    response_mask: Tensor,  # [B, T]
) -> dict[str, float]:
    """The consistency metrics; NaN Pearson when fewer than two tokens or no variance."""
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
    return {PEARSON: pearson, LOG_PPL_DIFF: log_ppl_diff, PEARSON_TOKENS: float(rollout_p.numel())}


def pearson_undefined_reason(metrics: Mapping[str, float]) -> str | None:
    """Why ``metrics``' Pearson (from :func:`rollout_actor_consistency`) is NaN: ``<2 tokens``,
    ``non-finite log-probs`` (a NaN or infinite log-prob poisons both metrics), or ``no
    variance``. ``None`` when it is a number, or when ``metrics`` cannot tell (no token count:
    not measured here, e.g. a verl run's)."""
    pearson, tokens = metrics.get(PEARSON), metrics.get(PEARSON_TOKENS)
    if pearson is None or not math.isnan(pearson) or tokens is None:
        return None
    if tokens < 2:
        return "<2 tokens"
    if not math.isfinite(metrics.get(LOG_PPL_DIFF, float("nan"))):
        return "non-finite log-probs"
    return "no variance"
