"""Masked reductions over ``[batch, response_len]`` tensors (mask: 1 = a policy token)."""

from __future__ import annotations

import torch
from torch import Tensor


def masked_sum(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``values`` where ``mask`` is set; NaNs under a zero mask do not leak in."""
    kept = torch.where(mask.bool(), values, 0.0) * mask
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``values`` where ``mask`` is set (0 for an empty mask, via a 1e-8 floor)."""
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(values, mask, dim) / (count + 1e-8)


def masked_var(values: Tensor, mask: Tensor) -> Tensor:
    """Unbiased variance over the masked elements.

    Raises:
        ValueError: fewer than two masked elements (the variance is undefined).
    """
    count = mask.sum()
    if count < 2:
        raise ValueError(
            f"masked_var needs at least two masked elements, got {int(count)}; use a larger "
            "mini-batch or an estimator that does not whiten."
        )
    centered = values - masked_mean(values, mask)
    return masked_mean(centered.square(), mask) * (count / (count - 1))


def masked_whiten(values: Tensor, mask: Tensor) -> Tensor:
    """``(values - mean) / sqrt(var + 1e-8)`` with statistics over the masked elements."""
    return (values - masked_mean(values, mask)) * torch.rsqrt(masked_var(values, mask) + 1e-8)
