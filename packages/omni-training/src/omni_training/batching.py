"""Turning per-sample tensors into micro-batches the model can run.

Each sample brings its processed prompt (``model_inputs`` with a leading batch dim of 1:
``input_ids``, ``attention_mask``, optional ``position_ids`` ``[3, 1, P]`` for mrope,
multimodal tensors) and its response ids. A micro-batch row is
``prompt (left-padded) | response (right-padded)``, so the last ``T`` positions of every row
are the response slots. Multimodal tensors without a batch dimension (``pixel_values``
``[patches, dim]``, ``image_grid_thw`` ``[images, 3]``) are concatenated in sample order;
audio features are right-padded along time. A value that is not a tensor is a forward switch
(``use_audio_in_video``): the rows that carry it must agree, and it passes once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from omni_contracts import RESPONSE_LENGTHS_KEY, TrainingAdapter

SEQUENCE_KEYS = ("input_ids", "attention_mask")
TOKEN_TYPE_KEYS = ("mm_token_type_ids",)
"""Per-token ``[1, P]`` values: each token's medium (0: text), which Qwen2-VL's mrope reads.
Left-padded with 0 like the mask; the response's tokens are text (placeholders are never
sampled); a prompt without them (a text-only row) is all text."""


@dataclass
class TeacherLogProbs:
    """A teacher's view of the sampled responses (on-policy distillation).

    ``log_probs`` are the teacher's log-probs of the sampled tokens; the top-k fields are
    filled only for losses that need the teacher's distribution (``forward_kl_topk``).
    """

    log_probs: Tensor  # [B, T]
    topk_ids: Tensor | None = None  # [B, T, k]
    topk_log_probs: Tensor | None = None  # [B, T, k]
TIME_PADDED_KEYS = ("input_features", "feature_attention_mask")  # [1, ..., frames]


@dataclass
class MicroBatch:
    """What the actor needs for one forward/backward."""

    model_inputs: dict[str, Any]  # prompt + response rows, plus multimodal tensors
    responses: Tensor  # [B, T]
    response_mask: Tensor  # [B, T]
    old_log_probs: Tensor | None = None  # [B, T]
    advantages: Tensor | None = None  # [B, T]
    ref_log_probs: Tensor | None = None  # [B, T]
    rollout_log_probs: Tensor | None = None  # [B, T]
    rollout_is_weights: Tensor | None = None  # [B, T] rollout correction's importance weights
    teacher: TeacherLogProbs | None = None  # on-policy distillation only
    extra: dict[str, list[Any]] = field(default_factory=dict)  # namespaced extra fields

    @property
    def num_tokens(self) -> int:
        return int(self.response_mask.sum())

    def to(self, device: torch.device | str, *, float_dtype: torch.dtype | None = None) -> MicroBatch:
        """A copy with every tensor on ``device`` and the floating-point model inputs (media
        features) in ``float_dtype`` -- the model's: a bf16 audio tower does not cast its
        fp32 input features -- or itself when nothing changes. Log-probs, advantages and
        masks keep their dtypes; extra fields stay as they are (the adapter's
        ``prepare_model_inputs`` places them)."""
        device = torch.device(device)

        def needs_cast(value: Any) -> bool:
            return float_dtype is not None and isinstance(value, Tensor) and value.is_floating_point() \
                and value.dtype != float_dtype

        if self.responses.device == device and not any(needs_cast(v) for v in self.model_inputs.values()):
            return self

        def move(value: Any) -> Any:
            return value.to(device) if isinstance(value, Tensor) else value

        def move_input(value: Any) -> Any:
            return value.to(device, dtype=float_dtype) if needs_cast(value) else move(value)

        teacher = self.teacher
        if teacher is not None:
            teacher = TeacherLogProbs(move(teacher.log_probs), move(teacher.topk_ids), move(teacher.topk_log_probs))
        return MicroBatch(
            model_inputs={key: move_input(value) for key, value in self.model_inputs.items()},
            responses=move(self.responses), response_mask=move(self.response_mask),
            old_log_probs=move(self.old_log_probs), advantages=move(self.advantages),
            ref_log_probs=move(self.ref_log_probs), rollout_log_probs=move(self.rollout_log_probs),
            rollout_is_weights=move(self.rollout_is_weights),
            teacher=teacher, extra=self.extra,
        )

    def response_lengths(self) -> list[int]:
        """Each row's response length: up to its last masked-in token (holes included)."""
        positions = torch.arange(1, self.response_mask.shape[1] + 1, device=self.response_mask.device)
        return [int(v) for v in (positions * (self.response_mask > 0)).amax(dim=1)]


def adapter_model_inputs(batch: MicroBatch, adapter: TrainingAdapter, model_config: Any) -> dict[str, Any]:
    """The forward's keyword arguments: ``batch.model_inputs`` through the adapter's
    ``prepare_model_inputs``, with the extra fields and response lengths it may need."""
    micro_batch = {**batch.extra, RESPONSE_LENGTHS_KEY: batch.response_lengths()}
    return adapter.prepare_model_inputs(dict(batch.model_inputs), micro_batch, model_config)


def collate(
    prompts: Sequence[Mapping[str, Any]],
    responses: Sequence[Sequence[int] | Tensor],
    response_masks: Sequence[Sequence[int] | Tensor] | None = None,
    *,
    pad_token_id: int,
) -> tuple[dict[str, Any], Tensor, Tensor]:
    """Build ``(model_inputs, responses [B, T], response_mask [B, T])`` for ``len(prompts)`` rows.

    Raises:
        ValueError: counts differ, or a prompt lacks ``input_ids``/``attention_mask``.
    """
    if len(prompts) != len(responses) or (response_masks is not None and len(response_masks) != len(prompts)):
        raise ValueError(
            f"collate got {len(prompts)} prompts, {len(responses)} responses and "
            f"{'no' if response_masks is None else len(response_masks)} masks; they must match."
        )
    response_rows = [torch.as_tensor(r, dtype=torch.long).reshape(-1) for r in responses]
    mask_rows = (
        [torch.ones_like(r) for r in response_rows]
        if response_masks is None
        else [torch.as_tensor(m, dtype=torch.long).reshape(-1) for m in response_masks]
    )
    t = max(int(r.numel()) for r in response_rows)
    resp = torch.full((len(prompts), t), pad_token_id, dtype=torch.long)
    resp_mask = torch.zeros((len(prompts), t), dtype=torch.long)
    for i, (r, m) in enumerate(zip(response_rows, mask_rows, strict=True)):
        resp[i, : r.numel()] = r
        resp_mask[i, : m.numel()] = m
    for i, prompt in enumerate(prompts):
        missing = [key for key in SEQUENCE_KEYS if key not in prompt]
        if missing:
            raise ValueError(f"Prompt {i} lacks {missing}; pass the processor's output for it.")
    p = max(int(prompt["input_ids"].shape[-1]) for prompt in prompts)
    inputs: dict[str, Any] = {
        "input_ids": torch.cat(
            [_left_pad(pr["input_ids"].reshape(1, -1), p, pad_token_id) for pr in prompts]
        ),
        "attention_mask": torch.cat(
            [_left_pad(pr["attention_mask"].reshape(1, -1), p, 0) for pr in prompts]
        ),
    }
    inputs["input_ids"] = torch.cat([inputs["input_ids"], resp], dim=1)
    # Right padding of the response is masked out; the causal mask keeps it out of view.
    inputs["attention_mask"] = torch.cat([inputs["attention_mask"], (resp_mask > 0).long()], dim=1)
    if all("position_ids" in pr for pr in prompts):
        inputs["position_ids"] = _extend_positions([pr["position_ids"] for pr in prompts], p, t)
    for key in TOKEN_TYPE_KEYS:
        if any(pr.get(key) is not None for pr in prompts):
            types = [pr[key] if pr.get(key) is not None else torch.zeros_like(pr["input_ids"]) for pr in prompts]
            prompt_types = torch.cat([_left_pad(row.reshape(1, -1), p, 0) for row in types])
            inputs[key] = torch.cat([prompt_types, prompt_types.new_zeros(resp.shape)], dim=1)
    for key in sorted({k for pr in prompts for k in pr} - {*SEQUENCE_KEYS, *TOKEN_TYPE_KEYS, "position_ids"}):
        values = [pr[key] for pr in prompts if pr.get(key) is not None]
        if not values:
            continue
        if not isinstance(values[0], Tensor):
            # A forward switch (``use_audio_in_video``): one value for the batch, as the rollout
            # engine passed it; never dropped, or the actor would compute another sequence.
            if any(value != values[0] for value in values[1:]):
                raise ValueError(f"Prompts disagree on {key!r} ({values}); batch prompts that share it.")
            inputs[key] = values[0]
            continue
        inputs[key] = _pad_time(values) if key in TIME_PADDED_KEYS else torch.cat(values)
    return inputs, resp, resp_mask


def _left_pad(row: Tensor, length: int, value: int) -> Tensor:
    pad = length - row.shape[-1]
    return torch.nn.functional.pad(row, (pad, 0), value=value) if pad else row


def _extend_positions(positions: Sequence[Tensor], p: int, t: int) -> Tensor:
    """mrope positions ``[3, 1, P_i]`` -> ``[3, B, P + T]``; responses continue as text."""
    rows = []
    for pos in positions:
        pos = pos.reshape(pos.shape[0], -1) if pos.dim() == 3 else pos.reshape(1, -1)
        start = pos[:, -1:] + 1
        response = start + torch.arange(t, dtype=pos.dtype).unsqueeze(0)
        rows.append(torch.cat([_left_pad(pos, p, 1), response], dim=1))
    stacked = torch.stack(rows, dim=1)  # [3 or 1, B, P + T]
    return stacked if stacked.shape[0] > 1 else stacked[0]


def _pad_time(values: Sequence[Tensor]) -> Tensor:
    frames = max(int(v.shape[-1]) for v in values)
    return torch.cat([torch.nn.functional.pad(v, (0, frames - v.shape[-1])) for v in values])


def plan_micro_batches(token_counts: Sequence[int], *, max_tokens: int | None, max_rows: int | None) -> list[list[int]]:
    """Group sample indices into micro-batches, in order.

    ``max_tokens`` bounds the padded size (rows x longest row) of each micro-batch (dynamic
    batching); ``max_rows`` bounds its rows. A sample longer than ``max_tokens`` gets a
    micro-batch of its own rather than being dropped.
    """
    if max_tokens is None and max_rows is None:
        raise ValueError("plan_micro_batches needs max_tokens, max_rows, or both.")
    groups: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index, count in enumerate(token_counts):
        grown = max(longest, count)
        too_many_rows = max_rows is not None and len(current) + 1 > max_rows
        too_many_tokens = max_tokens is not None and grown * (len(current) + 1) > max_tokens
        if current and (too_many_rows or too_many_tokens):
            groups.append(current)
            current, grown = [], count
        current.append(index)
        longest = grown
    if current:
        groups.append(current)
    return groups
