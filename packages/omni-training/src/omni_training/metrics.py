"""Batch statistics reported every step (verl's names)."""

from __future__ import annotations

from torch import Tensor


def length_metrics(response_mask: Tensor, prompt_mask: Tensor | None = None, *, max_response_length: int | None = None) -> dict[str, float]:
    """Response (and prompt) lengths; ``clip_ratio`` = share of responses that hit the cap."""
    lengths = response_mask.sum(dim=-1).float()
    metrics = {
        "response_length/mean": float(lengths.mean()),
        "response_length/max": float(lengths.max()),
        "response_length/min": float(lengths.min()),
    }
    if max_response_length is not None:
        metrics["response_length/clip_ratio"] = float((lengths >= max_response_length).float().mean())
    if prompt_mask is not None:
        prompt_lengths = prompt_mask.sum(dim=-1).float()
        metrics["prompt_length/mean"] = float(prompt_lengths.mean())
        metrics["prompt_length/max"] = float(prompt_lengths.max())
    return metrics
