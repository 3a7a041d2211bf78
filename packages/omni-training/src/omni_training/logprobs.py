"""Log-probabilities of response tokens under a causal LM, multimodal inputs included.

Layout: each row is ``prompt (left-padded) + response (right-padded)``; the model sees the
whole row, and the response's log-probs come from the positions just before each response
token. Only those ``T`` positions go through ``log_softmax``, and through the LM head when
the model takes ``logits_to_keep`` (transformers' causal LMs, and our thinker policies):
the prompt's full-vocab logits are the largest tensor of a long multimodal row and the
dominant cost on small models.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from omni_training.kl import entropy_from_log_probs


@dataclass(frozen=True)
class ResponseLogProbs:
    log_probs: Tensor  # [B, T], 0 where the mask is 0
    entropy: Tensor | None  # [B, T] when asked for
    topk_log_probs: Tensor | None = None  # [B, T, k]: the k most likely tokens per position
    topk_ids: Tensor | None = None  # [B, T, k]
    gathered_log_probs: Tensor | None = None  # [B, T, k]: at the ``gather_ids`` asked for


def gather_response_log_probs(
    logits: Tensor,  # [B, L, V], logits of the full row
    responses: Tensor,  # [B, T]
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    topk: int | None = None,
    gather_ids: Tensor | None = None,  # [B, T, k]
) -> ResponseLogProbs:
    """Log-probs of ``responses`` from a forward pass over ``prompt + response`` rows.

    ``entropy_grad=False`` computes the entropy outside autograd (a metric, not a loss term:
    no graph is kept for it). ``topk`` also returns each position's ``k`` most likely tokens and their log-probs;
    ``gather_ids`` returns the log-probs of the given tokens (a teacher's top-k) instead.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for log-probs, got {temperature}.")
    t = responses.shape[1]
    if logits.shape[1] <= t:
        raise ValueError(
            f"logits cover {logits.shape[1]} positions but the response has {t} tokens; "
            "pass logits for the whole prompt + response row."
        )
    scores = logits[:, -t - 1 : -1, :].float() / temperature  # position i predicts token i + 1
    all_log_probs = torch.log_softmax(scores, dim=-1)
    log_probs = all_log_probs.gather(-1, responses.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = entropy_from_log_probs(all_log_probs)
    topk_log_probs = topk_ids = gathered = None
    if topk is not None:
        topk_log_probs, topk_ids = all_log_probs.topk(topk, dim=-1)
    if gather_ids is not None:
        if gather_ids.shape[:2] != responses.shape:
            raise ValueError(
                f"gather_ids has shape {tuple(gather_ids.shape)}; expected [B, T, k] with "
                f"[B, T] = {tuple(responses.shape)}."
            )
        gathered = all_log_probs.gather(-1, gather_ids)
    return ResponseLogProbs(log_probs, entropy, topk_log_probs, topk_ids, gathered)


def keeps_last_logits(model: Any) -> bool:
    """Whether ``model`` (under a PEFT wrapper, if any) takes ``logits_to_keep``: then only
    the positions that predict the response are projected through the LM head."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def response_log_probs(
    model: Any,
    model_inputs: Mapping[str, Any],
    responses: Tensor,  # [B, T]
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    topk: int | None = None,
    gather_ids: Tensor | None = None,
) -> ResponseLogProbs:
    """Run ``model(**model_inputs)`` (``input_ids`` = prompt + response) and gather; a model
    that takes ``logits_to_keep`` computes only the response's logits."""
    input_ids = model_inputs["input_ids"]
    if not torch.equal(input_ids[:, -responses.shape[1] :], responses):
        raise ValueError(
            "model_inputs['input_ids'] must end with the responses (prompt left-padded, "
            "response right-padded, concatenated)."
        )
    keep = {"logits_to_keep": responses.shape[1] + 1} if keeps_last_logits(model) else {}
    outputs = model(**model_inputs, use_cache=False, **keep)
    return gather_response_log_probs(
        outputs.logits, responses, temperature=temperature, with_entropy=with_entropy,
        entropy_grad=entropy_grad, topk=topk, gather_ids=gather_ids,
    )
