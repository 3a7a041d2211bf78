"""Rejection of tokens or responses whose rollout and trainer log-probs disagree too much
(verl's ``algorithm.rollout_correction.rollout_rs``), with verl's ``rollout_rs_*`` metrics.

Where importance weights reweight a mismatch, rejection drops it: a token (``token_*``) or a
whole response (``seq_sum_*``, ``seq_mean_*``, ``seq_max_*``) whose divergence estimate is past
its threshold leaves the response mask, so it carries no gradient and no advantage. With
``r = pi_train / pi_rollout`` per token, the estimates are ``k1 = -log r`` (bounded on both
sides, given as ratio bounds ``"lower_upper"``; one number ``u`` means ``1/u`` to ``u``),
``k2 = (log r)^2 / 2`` and ``k3 = r - 1 - log r`` (upper bounds). Several modes, comma
separated, must all pass; ``rollout_rs_threshold`` gives one threshold for all or one each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from omni_training.masked import masked_mean, masked_sum

LOG_RATIO_BOUND = 20.0
"""Log-ratios are clamped to +-this before ``exp`` and the estimates (verl's bound): e^20 is about 5e8."""
ESTIMATES = ("k1", "k2", "k3")
SCOPES = ("token", "seq_sum", "seq_mean", "seq_max")
MODES = tuple(
    f"{scope}_{estimate}" for scope in SCOPES for estimate in ESTIMATES if not (scope == "seq_max" and estimate == "k1")
)
"""verl's rejection modes (a maximum of ``-log r`` bounds nothing useful, so ``seq_max_k1`` is none)."""


@dataclass(frozen=True)
class RejectionBound:
    """One mode and its bounds on the estimate: for ``k1``, ``log(lower)..log(upper)`` of the
    given ratio bounds; for ``k2``/``k3``, ``0..upper``."""

    mode: str
    upper: float
    lower: float | None = None

    @property
    def scope(self) -> str:
        return self.mode.rpartition("_")[0]

    @property
    def estimate(self) -> str:
        return self.mode.rpartition("_")[2]


def parse_rejection(modes: str, thresholds: float | int | str | None) -> list[RejectionBound]:
    """``rollout_rs`` and ``rollout_rs_threshold`` as bounds, one per distinct mode in order.

    Raises:
        ValueError: an unknown mode, no threshold, a count of thresholds that is neither 1 nor
            the number of modes, or a threshold that is not positive (``lower <= upper`` for k1).
    """
    names = list(dict.fromkeys(part.strip() for part in str(modes).split(",") if part.strip()))
    if not names:
        raise ValueError(f"rollout_rs={modes!r}: give one or more of {', '.join(MODES)}, comma separated")
    unknown = [name for name in names if name not in MODES]
    if unknown:
        raise ValueError(f"rollout_rs: unknown mode {', '.join(unknown)}; choose from {', '.join(MODES)}")
    if thresholds is None or isinstance(thresholds, bool):
        raise ValueError(f"rollout_rs={modes!r} needs rollout_rs_threshold (k1: 'lower_upper' ratio bounds; k2/k3: an upper bound)")
    specs = [thresholds] if isinstance(thresholds, int | float) else [p.strip() for p in str(thresholds).split(",") if p.strip()]
    if len(specs) not in (1, len(names)):
        raise ValueError(
            f"rollout_rs_threshold={thresholds!r}: give one threshold for all {len(names)} modes or one each"
        )
    specs = specs * len(names) if len(specs) == 1 else specs
    return [_bound(name, spec) for name, spec in zip(names, specs, strict=True)]


def _bound(mode: str, spec: float | int | str) -> RejectionBound:
    text = str(spec)
    try:
        if mode.endswith("k1"):
            lower_text, _, upper_text = text.partition("_")
            upper = float(upper_text or lower_text)
            lower = float(lower_text) if upper_text else 1.0 / upper
            if lower <= 0 or upper <= 0 or lower > upper:
                raise ValueError
            return RejectionBound(mode, math.log(upper), math.log(lower))
        if "_" in text:
            raise ValueError
        upper = float(text)
        if upper <= 0:
            raise ValueError
        return RejectionBound(mode, upper)
    except (ValueError, ZeroDivisionError):
        form = "positive ratio bounds 'lower_upper' with lower <= upper, or one upper ratio" if mode.endswith("k1") \
            else "one positive upper bound"
        raise ValueError(f"rollout_rs_threshold {text!r} for {mode}: give {form}") from None


@dataclass(frozen=True)
class Rejection:
    mask: Tensor  # [B, T]: the response mask without the rejected tokens
    metrics: dict[str, float]  # verl's names, without the rollout_corr/ prefix


def rejection_mask(log_ratio: Tensor, mask: Tensor, bounds: list[RejectionBound]) -> Rejection:
    """The response mask with every token or response some bound rejects removed, and the
    statistics of each estimate (see the module docstring).

    Raises:
        ValueError: the mask has no token.
    """
    if log_ratio.shape[0] == 0:
        return Rejection(mask, {})
    if not bool(mask.any()):
        raise ValueError("rejection needs at least one response token in the batch")
    safe = log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    per_token = {"k1": -safe, "k2": 0.5 * safe.square(), "k3": torch.exp(safe) - 1.0 - safe}
    present = mask.bool()
    has_tokens = mask.sum(dim=-1) > 0
    keep_all = torch.ones_like(mask, dtype=log_ratio.dtype)
    metrics: dict[str, float] = {}
    for bound in bounds:
        values = per_token[bound.estimate]
        per_response: Tensor | None = None
        if bound.scope != "token":
            per_response = _per_response(values, mask, bound.scope)
            values = per_response.unsqueeze(-1).expand_as(mask)
        keep = values <= bound.upper
        if bound.lower is not None:
            keep &= values >= bound.lower
        keep_float = keep.to(log_ratio.dtype)
        keep_all = keep_all * keep_float
        metrics.update(_estimate_metrics(bound, values, per_response, mask, has_tokens))
        response_kept = (keep | ~present).all(dim=-1)
        metrics[f"rollout_rs_{bound.mode}_masked_fraction"] = float(masked_mean(1 - keep_float, mask))
        metrics[f"rollout_rs_{bound.mode}_seq_masked_fraction"] = (
            float((~response_kept & has_tokens).sum() / has_tokens.sum()) if has_tokens.any() else 0.0
        )
    metrics["rollout_rs_masked_fraction"] = float(masked_mean(1 - keep_all, mask))
    metrics["rollout_rs_seq_masked_fraction"] = float((present & (keep_all <= 0.5)).any(dim=-1).float().mean())
    return Rejection((mask * keep_all).to(mask.dtype), metrics)


def _per_response(values: Tensor, mask: Tensor, scope: str) -> Tensor:
    if scope == "seq_sum":
        return masked_sum(values, mask, dim=-1)
    if scope == "seq_mean":
        return masked_mean(values, mask, dim=-1)
    peak = values.masked_fill(~mask.bool(), float("-inf")).max(dim=-1).values
    return torch.where(peak == float("-inf"), torch.zeros_like(peak), peak)


def _estimate_metrics(
    bound: RejectionBound, values: Tensor, per_response: Tensor | None, mask: Tensor, has_tokens: Tensor
) -> dict[str, float]:
    """verl's statistics of one mode's estimate: mean, extremes, shares past each bound, the
    spread of the clamped estimate, and per-response summaries (``values`` is per token; a
    response-scope estimate is repeated over its tokens)."""
    prefix = f"rollout_rs_{bound.mode}"
    lower = bound.lower if bound.lower is not None else 0.0
    responses = per_response if per_response is not None else masked_mean(values, mask, dim=-1)
    responses = responses[has_tokens]
    by_response = bound.scope != "token" and responses.numel() > 0
    present = mask.bool()
    m: dict[str, float] = {f"{prefix}_mean": float(masked_mean(values, mask))}
    if by_response:
        m[f"{prefix}_max"], m[f"{prefix}_min"] = float(responses.max()), float(responses.min())
        m[f"{prefix}_fraction_high"] = float((responses > bound.upper).float().mean())
        m[f"{prefix}_fraction_low"] = float((responses < lower).float().mean()) if bound.lower is not None else 0.0
    else:
        m[f"{prefix}_max"] = float(values.masked_fill(~present, float("-inf")).max())
        m[f"{prefix}_min"] = float(values.masked_fill(~present, float("inf")).min())
        m[f"{prefix}_fraction_high"] = float(masked_mean((values > bound.upper).to(mask.dtype), mask))
        m[f"{prefix}_fraction_low"] = (
            float(masked_mean((values < lower).to(mask.dtype), mask)) if bound.lower is not None else 0.0
        )
    if mask.sum() > 1:
        clamped = values.clamp(min=lower, max=bound.upper)
        mean = masked_mean(clamped, mask)
        m[f"{prefix}_std"] = float(torch.sqrt((masked_mean(clamped.square(), mask) - mean.square()).clamp(min=0.0)))
    else:
        m[f"{prefix}_std"] = 0.0
    if responses.numel() > 0:
        m[f"{prefix}_seq_mean"] = float(responses.mean())
        m[f"{prefix}_seq_std"] = float(responses.std()) if responses.numel() > 1 else 0.0
        m[f"{prefix}_seq_max"], m[f"{prefix}_seq_min"] = float(responses.max()), float(responses.min())
        m[f"{prefix}_seq_max_deviation"] = float(responses.abs().max())
        m[f"{prefix}_seq_fraction_high"] = float((responses > bound.upper).float().mean())
        if bound.lower is not None:
            m[f"{prefix}_seq_fraction_low"] = float((responses < lower).float().mean())
    else:
        for name in ("seq_mean", "seq_std", "seq_max", "seq_min", "seq_max_deviation", "seq_fraction_high", "seq_fraction_low"):
            m[f"{prefix}_{name}"] = 0.0
    return m
