"""Importance weights between the rollout's and the trainer's log-probs (verl's
``algorithm.rollout_correction.rollout_is``), with verl's ``rollout_corr/rollout_is_*`` metrics.

The rollout samples with its own kernels, precision and (for a mixture of experts) routing, so
``pi_train / pi_rollout`` drifts from 1; weighting each token's policy-gradient term by it,
truncated, keeps the update on-policy in expectation (truncated importance sampling, TIS).
``level="token"`` weights each token by its own ratio (biased, low variance);
``level="sequence"`` weights every token of a response by the product of its ratios
(unbiased, high variance). ``threshold`` is an upper bound (weights are clamped to it: TIS) or
``"lower_upper"`` (weights outside the band become 0: IcePop).

:func:`correct` is the whole of it for one batch: the weights, the rejection mask
(:mod:`omni_training.rollout_rejection`) and verl's off-policy metrics (KL, perplexities, chi^2),
under verl's ``rollout_corr/`` names. The verl engine applies verl's own implementation;
``tests/test_rollout_correction.py`` holds this one to verl's on a generated corpus.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from omni_training.masked import masked_mean, masked_sum
from omni_training.rollout_rejection import LOG_RATIO_BOUND, RejectionBound, parse_rejection, rejection_mask
LEVELS = ("token", "sequence")
LOSS_TYPES = ("ppo_clip", "reinforce")
METRIC_PREFIX = "rollout_corr/"


@dataclass(frozen=True)
class CorrectionSettings:
    """verl's ``algorithm.rollout_correction`` (its names and meanings), checked on creation.

    Decoupled (``bypass_mode=False``): the actor recomputes the old log-probs, and the weights
    and rejection compare them with the rollout's once per step. Bypass: the rollout's
    log-probs are the old ones (no recompute); the weights and rejection compare the current
    policy with the rollout in each micro-batch's loss, and ``loss_type`` picks the loss:
    ``ppo_clip`` (the configured policy loss, whose ratio already is ``pi / pi_rollout``: the
    weights are only measured) or ``reinforce`` (``-w * A * log pi``).
    """

    rollout_is: str | None = None
    rollout_is_threshold: float | int | str | None = 2.0
    rollout_is_batch_normalize: bool = False
    rollout_rs: str | None = None
    rollout_rs_threshold: float | int | str | None = None
    bypass_mode: bool = False
    loss_type: str = "ppo_clip"

    def __post_init__(self) -> None:
        if self.rollout_is is not None:
            if self.rollout_is not in LEVELS:
                raise ValueError(f"rollout_is={self.rollout_is!r}: choose one of {', '.join(LEVELS)}, or null for none")
            if self.rollout_is_threshold is None:
                raise ValueError("rollout_is is set but rollout_is_threshold is null: give an upper bound (2.0) or 'lower_upper'")
        if self.rollout_is_threshold is not None:  # checked when given, used or not (verl reads it either way)
            Threshold.parse(self.rollout_is_threshold)
        if self.rollout_rs is not None:
            self.rejection_bounds  # noqa: B018 -- parsing checks the modes and thresholds
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"rollout_correction.loss_type={self.loss_type!r}: choose one of {', '.join(LOSS_TYPES)}")

    @property
    def corrects(self) -> bool:
        """Weights or rejection are on (otherwise only the off-policy metrics are measured)."""
        return self.rollout_is is not None or self.rollout_rs is not None

    @property
    def rejection_bounds(self) -> list[RejectionBound]:
        return parse_rejection(self.rollout_rs, self.rollout_rs_threshold) if self.rollout_rs is not None else []


@dataclass(frozen=True)
class Correction:
    weights: Tensor | None  # [B, T] importance weights (rollout_is set), detached
    mask: Tensor  # [B, T] the response mask without rejected tokens
    metrics: dict[str, float]  # under rollout_corr/


def correct(actor_log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor, settings: CorrectionSettings) -> Correction:
    """Weights, rejection and the off-policy metrics for one batch (verl's
    ``compute_rollout_correction_and_rejection_mask``).

    Raises:
        ValueError: shapes differ, or the mask has no token.
    """
    if actor_log_probs.shape != rollout_log_probs.shape or actor_log_probs.shape != mask.shape:
        raise ValueError(
            f"rollout correction needs equal shapes: actor {tuple(actor_log_probs.shape)}, rollout "
            f"{tuple(rollout_log_probs.shape)}, mask {tuple(mask.shape)}"
        )
    if not bool(mask.any()):
        raise ValueError("rollout correction needs at least one response token in the batch")
    log_ratio = actor_log_probs - rollout_log_probs
    metrics: dict[str, float] = {}
    weights = None
    if settings.rollout_is is not None:
        assert settings.rollout_is_threshold is not None  # CorrectionSettings checked it
        is_weights = importance_weights(
            log_ratio, mask, settings.rollout_is, settings.rollout_is_threshold, settings.rollout_is_batch_normalize
        )
        weights = is_weights.weights
        metrics.update(is_weights.metrics)
    kept = mask.clone()
    if settings.rollout_rs is not None:
        rejection = rejection_mask(log_ratio, mask, settings.rejection_bounds)
        kept = rejection.mask
        metrics.update(rejection.metrics)
    metrics.update(off_policy_metrics(actor_log_probs, rollout_log_probs, mask))
    return Correction(weights, kept, {f"{METRIC_PREFIX}{key}": value for key, value in metrics.items()})


def off_policy_metrics(actor_log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor) -> dict[str, float]:
    """How far the rollout's distribution is from the actor's on the sampled tokens (verl's
    names, without the prefix): KL(rollout || actor) directly and by k3, both perplexities
    (means of per-response perplexities) and their log difference, and chi^2 of the token and
    response ratios (clamped at verl's e^20)."""
    actor_mean = masked_mean(actor_log_probs, mask, dim=-1)
    rollout_mean = masked_mean(rollout_log_probs, mask, dim=-1)
    log_ratio = actor_log_probs - rollout_log_probs
    log_ppl_diff = rollout_mean - actor_mean
    token_ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    sequence_log_ratio = masked_sum(log_ratio, mask, dim=-1).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    return {
        "training_ppl": float(torch.exp(-actor_mean).mean()),
        "training_log_ppl": float((-actor_mean).mean()),
        "kl": float(masked_mean(rollout_log_probs - actor_log_probs, mask)),
        "k3_kl": float(masked_mean(torch.exp(log_ratio) - log_ratio - 1, mask)),
        "rollout_ppl": float(torch.exp(-rollout_mean).mean()),
        "rollout_log_ppl": float((-rollout_mean).mean()),
        "log_ppl_diff": float(log_ppl_diff.mean()),
        "log_ppl_abs_diff": float(log_ppl_diff.abs().mean()),
        "log_ppl_diff_max": float(log_ppl_diff.max()),
        "log_ppl_diff_min": float(log_ppl_diff.min()),
        "ppl_ratio": float(torch.exp(log_ppl_diff).mean()),
        "chi2_token": float(masked_mean(token_ratio.square(), mask) - 1.0),
        "chi2_seq": float(torch.exp(2.0 * sequence_log_ratio).mean() - 1.0),
    }


@dataclass(frozen=True)
class Threshold:
    """An IS threshold: ``upper`` alone truncates (TIS); with ``lower``, a band (IcePop)."""

    upper: float
    lower: float | None = None

    @classmethod
    def parse(cls, spec: float | int | str) -> Threshold:
        """``2.0``, ``"2.0"`` or ``"0.5_5.0"`` (verl's ``rollout_is_threshold`` forms).

        Raises:
            ValueError: not a number or a ``lower_upper`` pair of positive finite numbers,
                lower <= upper (``nan`` passed every check and made every step's loss NaN).
        """
        if isinstance(spec, bool) or not isinstance(spec, int | float | str):
            raise ValueError(f"rollout_is_threshold={spec!r}: give a number (2.0) or a band as 'lower_upper' (0.5_5.0)")
        text = str(spec).strip()
        lower_text, _, upper_text = text.rpartition("_") if "_" in text else ("", "", text)
        try:
            upper = float(upper_text)
            lower = float(lower_text) if lower_text else None
        except ValueError:
            raise ValueError(
                f"rollout_is_threshold={spec!r}: give a number (2.0) or a band as 'lower_upper' (0.5_5.0)"
            ) from None
        if not all(math.isfinite(bound) for bound in (upper, lower) if bound is not None):
            raise ValueError(f"rollout_is_threshold={spec!r}: give finite bounds (2.0, or 0.5_5.0)")
        if upper <= 0 or (lower is not None and not 0 < lower <= upper):
            raise ValueError(f"rollout_is_threshold={spec!r}: bounds must be positive, the lower one at most the upper")
        return cls(upper, lower)


@dataclass(frozen=True)
class ImportanceWeights:
    weights: Tensor  # [B, T], 0 on padding; detached
    metrics: dict[str, float]  # verl's names, without the rollout_corr/ prefix


def importance_weights(
    log_ratio: Tensor,  # [B, T]: log pi_train - log pi_rollout
    mask: Tensor,  # [B, T]: 1 on response tokens
    level: str = "token",
    threshold: float | str = 2.0,
    batch_normalize: bool = False,
) -> ImportanceWeights:
    """Truncated importance weights for a batch and their statistics (see the module docstring).

    ``batch_normalize`` rescales the weights to mean 1 (over tokens, or over responses for
    ``sequence``); the metrics describe the weights before it.

    Raises:
        ValueError: an unknown ``level``, a bad ``threshold``, or a mask with no token.
    """
    if level not in LEVELS:
        raise ValueError(f"rollout_is={level!r}: choose one of {', '.join(LEVELS)}")
    bounds = Threshold.parse(threshold)
    if not bool(mask.any()):
        raise ValueError("importance weights need at least one response token in the batch")
    mask = mask.to(log_ratio.dtype)
    if level == "token":
        ratio_logs = log_ratio  # the metrics read these unclamped
        raw = torch.exp(log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    else:
        ratio_logs = masked_sum(log_ratio, mask, dim=-1).unsqueeze(-1)  # [B, 1]
        raw = torch.exp(ratio_logs.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)).expand_as(log_ratio)
    raw = raw * mask
    if bounds.lower is None:
        weights = raw.clamp(max=bounds.upper)
    else:
        inside = (raw >= bounds.lower) & (raw <= bounds.upper)
        weights = torch.where(inside, raw, torch.zeros_like(raw))
    metrics = weight_metrics(weights, raw, ratio_logs, mask, level, bounds)
    if bounds.lower is not None:
        outside = (raw < bounds.lower) | (raw > bounds.upper)
        metrics["rollout_is_oob_ratio"] = float(masked_mean(outside.to(mask.dtype), mask))
    weights = weights.detach()
    if batch_normalize:
        if level == "token":
            mean = masked_mean(weights, mask)
        else:
            per_response = masked_mean(weights, mask, dim=-1)
            has_tokens = (mask.sum(dim=-1) > 0).to(weights.dtype)
            mean = (per_response * has_tokens).sum() / has_tokens.sum().clamp_min(1e-8)
        if mean > 1e-8:
            weights = weights / mean
            metrics["rollout_is_batch_norm_factor"] = float(mean)
        else:
            metrics["rollout_is_batch_norm_factor"] = 1.0
    return ImportanceWeights(weights, metrics)


def weight_metrics(
    weights: Tensor, raw: Tensor, ratio_logs: Tensor, mask: Tensor, level: str, bounds: Threshold
) -> dict[str, float]:
    """verl's ``rollout_is_*`` statistics of ``weights`` (after truncation) and of ``raw``
    (before it): mean, extremes, the shares beyond each bound, spread, effective sample size
    and per-response means. Without a lower bound, the lower one is ``1 / upper``."""
    lower = bounds.lower if bounds.lower is not None else 1.0 / bounds.upper
    m: dict[str, float] = {"rollout_is_mean": float(masked_mean(weights, mask))}
    if level == "sequence":
        m["rollout_is_max"] = math.exp(min(float(ratio_logs.max()), LOG_RATIO_BOUND))
        m["rollout_is_min"] = math.exp(float(ratio_logs.min()))
        m["rollout_is_ratio_fraction_high"] = float((ratio_logs > math.log(bounds.upper)).float().mean())
        m["rollout_is_ratio_fraction_low"] = float((ratio_logs < math.log(lower)).float().mean())
    else:
        kept = mask.bool()
        m["rollout_is_ratio_fraction_high"] = float(masked_mean((raw > bounds.upper).to(mask.dtype), mask))
        m["rollout_is_ratio_fraction_low"] = float(masked_mean((raw < lower).to(mask.dtype), mask))
        m["rollout_is_max"] = float(weights.masked_fill(~kept, float("-inf")).max())
        m["rollout_is_min"] = float(weights.masked_fill(~kept, float("inf")).min())
    bounded = weights.clamp(0.0, bounds.upper)
    mean = masked_mean(bounded, mask)
    if mask.sum() > 1:
        m["rollout_is_std"] = float(torch.sqrt((masked_mean(bounded.square(), mask) - mean.square()).clamp(min=0.0)))
    else:
        m["rollout_is_std"] = 0.0
    second_moment = float(masked_mean((bounded / (mean + 1e-8)).square(), mask))
    # Every weight 0 (IcePop with the whole batch outside its band): no effective sample. verl
    # 0.9.1 divides by zero here and stops the step.
    m["rollout_is_eff_sample_size"] = 1.0 / second_moment if second_moment > 0 else 0.0
    per_response = masked_mean(weights, mask, dim=-1)
    m["rollout_is_seq_mean"] = float(per_response.mean())
    m["rollout_is_seq_std"] = float(per_response.std()) if per_response.numel() > 1 else 0.0
    m["rollout_is_seq_max"] = float(per_response.max())
    m["rollout_is_seq_min"] = float(per_response.min())
    m["rollout_is_seq_max_deviation"] = float((per_response - 1.0).abs().max())
    raw_per_response = masked_mean(raw, mask, dim=-1)
    m["rollout_is_seq_fraction_high"] = float((raw_per_response > bounds.upper).float().mean())
    m["rollout_is_seq_fraction_low"] = float((raw_per_response < lower).float().mean())
    return m
