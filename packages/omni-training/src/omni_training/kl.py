"""KL estimators between the policy and the reference (http://joschu.net/blog/kl-approx.html).

``kl``/``k1``: ``log pi - log ref``; ``abs``; ``mse``/``k2``: ``0.5 (log pi - log ref)^2``;
``low_var_kl``/``k3``: ``ref/pi - log(ref/pi) - 1``, clamped to [-10, 10]. A ``+`` suffix
(``k1+``, ``k3+``, ``low_var_kl+``) keeps the estimator's value but takes k2's gradient,
which is the unbiased one. Used as a loss (``actor.use_kl_loss``, ``kl_loss_type``) or as a
reward penalty (``algorithm.use_kl_in_reward``, ``algorithm.kl_penalty``).
"""

from __future__ import annotations

import torch
from torch import Tensor

KL_MODES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def kl_estimate(log_prob: Tensor, ref_log_prob: Tensor, mode: str) -> Tensor:
    """Per-token KL estimate ``[B, T]``.

    Raises:
        ValueError: an unknown mode; the message lists the valid ones.
    """
    straight_through = mode.endswith("+")
    base = mode[:-1] if straight_through else mode
    value = _forward(log_prob, ref_log_prob, base, mode)
    if not straight_through or base in ("mse", "k2"):
        return value
    k2 = 0.5 * (log_prob - ref_log_prob).square()
    return k2 - k2.detach() + value.detach()


def _forward(log_prob: Tensor, ref_log_prob: Tensor, base: str, mode: str) -> Tensor:
    if base in ("kl", "k1"):
        return log_prob - ref_log_prob
    if base == "abs":
        return (log_prob - ref_log_prob).abs()
    if base in ("mse", "k2"):
        return 0.5 * (log_prob - ref_log_prob).square()
    if base in ("low_var_kl", "k3"):
        log_ratio = torch.clamp(ref_log_prob - log_prob, -20, 20)
        return torch.clamp(torch.exp(log_ratio) - log_ratio - 1, -10, 10)
    valid = ", ".join(KL_MODES) + " (each also with a '+' suffix)"
    raise ValueError(f"Unknown KL estimator {mode!r}; valid: {valid}.")


def kl_penalized_rewards(
    token_level_scores: Tensor,  # [B, T]
    log_prob: Tensor,  # [B, T]
    ref_log_prob: Tensor,  # [B, T]
    response_mask: Tensor,  # [B, T]
    *,
    coef: float,
    mode: str = "kl",
) -> tuple[Tensor, Tensor]:
    """Rewards minus ``coef`` times the per-token KL; also the batch's mean sequence KL."""
    kl = kl_estimate(log_prob, ref_log_prob, mode) * response_mask
    per_sequence = kl.sum(dim=-1) / response_mask.sum(dim=-1).clamp(min=1)
    return token_level_scores - coef * kl, per_sequence.mean()


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the categorical distribution per position: ``[..., V] -> [...]``."""
    return entropy_from_log_probs(torch.log_softmax(logits.float(), dim=-1))


def entropy_from_log_probs(log_probs: Tensor) -> Tensor:
    """Entropy per position of normalised log-probs ``[..., V] -> [...]`` (a ``log_softmax``)."""
    return -(log_probs.exp() * log_probs).sum(dim=-1)
