"""The actor scores the distribution the rollout sampled from.

A rollout never samples some ids of the policy stage: a text policy's media placeholders and
the padded tail of its output head past the tokenizer, a talker's codec control ids
(:class:`omni_contracts.LogitMask`). Both rollouts (the local engine, and vLLM's
``processed_logprobs`` on verl) report log-probs under that masked distribution. An actor
that recomputes them over the full vocabulary is off by ``log(1 - P(masked))`` on every
token: a bias in the rollout-actor metrics (``rollout_corr/log_ppl_diff``, 0.02 on a small
vocabulary) and in the importance ratio. :func:`mask_policy_logits` masks the same ids in
the policy's forward output, so the actor, its reference and the rollout share one
distribution, on either engine.

Masked logits are set to the dtype's lowest finite value, not ``-inf``: their probability is
0 and an entropy's ``p * log p`` stays 0 instead of NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils.hooks import RemovableHandle

from omni_contracts import LogitMask


def masked_ids(mask: LogitMask, width: int) -> tuple[int, ...]:
    """The ids of a ``width``-wide output that ``mask`` forbids: its banned ids and every id at
    or past its ``vocab_size``."""
    return (*mask.banned_token_ids, *range(mask.vocab_size, width))


def mask_logits(logits: Tensor, mask: LogitMask) -> Tensor:
    """``logits`` ``[..., V]`` with the ids ``mask`` forbids at the dtype's lowest value."""
    width = logits.shape[-1]
    if mask.vocab_size > width:
        raise ValueError(
            f"The policy's logits are {width} wide, but its logit mask is for a {mask.vocab_size}-id vocabulary: "
            "the mask was built for another stage."
        )
    columns = torch.zeros(width, dtype=torch.bool, device=logits.device)
    ids: Sequence[int] = masked_ids(mask, width)
    if not ids:
        return logits
    columns[list(ids)] = True
    return logits.masked_fill(columns, torch.finfo(logits.dtype).min)


def mask_policy_logits(module: Any, mask: LogitMask) -> RemovableHandle:
    """Mask ``module``'s output ``logits`` with ``mask`` in every forward (a forward hook;
    ``remove()`` the returned handle to undo it). The module returns a transformers model
    output, or a mapping, with ``logits``."""

    def hook(_: Any, __: Any, output: Any) -> Any:
        logits = output.get("logits") if hasattr(output, "get") else None
        if logits is None:
            raise TypeError(
                f"{type(module).__name__} returned {type(output).__name__} without 'logits'; the logit mask needs "
                "the policy's logits (verl's actor_rollout_ref.model.use_fused_kernels computes log-probs inside the "
                "forward instead: leave it off)."
            )
        output["logits"] = mask_logits(logits, mask)
        return output

    handle: RemovableHandle = module.register_forward_hook(hook)
    return handle
