"""How a ``[batch, response_len]`` loss matrix becomes one scalar (``actor.loss_agg_mode``).

- ``token-mean``: every valid token weighs the same (DAPO).
- ``token-sum``: the sum over valid tokens.
- ``seq-mean-token-sum``: per-sequence token sums, averaged over sequences.
- ``seq-mean-token-mean``: per-sequence token means, averaged over sequences (GRPO, GSPO paper).
- ``seq-mean-token-sum-norm``: ``seq-mean-token-sum`` divided by a constant horizon
  (Dr.GRPO, https://arxiv.org/abs/2503.20783), by default the padded response length.

Fully masked sequences never count as sequences. For gradient accumulation the batch-level
counts can be passed in, so that micro-batch losses add up to the mini-batch loss.
"""

from __future__ import annotations

from typing import Literal, get_args

from torch import Tensor

from omni_training.masked import masked_sum

LossAggMode = Literal[
    "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
]
LOSS_AGG_MODES: tuple[str, ...] = get_args(LossAggMode)


def aggregate_loss(
    loss_mat: Tensor,  # [B, T]
    mask: Tensor,  # [B, T]
    mode: str,
    *,
    num_tokens: Tensor | float | None = None,
    num_sequences: Tensor | float | None = None,
    horizon: float | None = None,
) -> Tensor:
    """Reduce ``loss_mat`` to a scalar.

    Args:
        loss_mat: per-token losses.
        mask: 1 for tokens that count.
        mode: one of :data:`LOSS_AGG_MODES`.
        num_tokens: valid tokens in the whole mini-batch (``token-mean``); default: this one's.
        num_sequences: non-empty sequences in the mini-batch (``seq-mean-*``); default: this one's.
        horizon: the constant of ``seq-mean-token-sum-norm``; default ``loss_mat.shape[-1]``.

    Raises:
        ValueError: an unknown mode; the message lists the valid ones.
    """
    if mode == "token-mean":
        denominator = mask.sum() if num_tokens is None else num_tokens
        return masked_sum(loss_mat, mask) / denominator
    if mode == "token-sum":
        return masked_sum(loss_mat, mask)
    if mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean"):
        tokens_per_seq = mask.sum(dim=-1)
        per_seq = masked_sum(loss_mat, mask, dim=-1)
        if mode == "seq-mean-token-mean":
            per_seq = per_seq / (tokens_per_seq + 1e-8)
        non_empty = (tokens_per_seq > 0).to(loss_mat.dtype)
        denominator = non_empty.sum() if num_sequences is None else num_sequences
        loss = masked_sum(per_seq, non_empty) / denominator
        if mode == "seq-mean-token-sum-norm":
            loss = loss / (loss_mat.shape[-1] if horizon is None else horizon)
        return loss
    raise ValueError(f"Unknown loss_agg_mode {mode!r}; valid: {', '.join(LOSS_AGG_MODES)}.")

