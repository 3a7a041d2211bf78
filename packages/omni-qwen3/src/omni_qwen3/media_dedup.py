"""Encode each distinct image and audio of a forward call once.

A GRPO batch repeats every prompt ``n`` times (the generation batch, and the actor's
micro-batches), and with it the prompt's media: the encoders ran ``n`` times on the same
pixels and the same mel frames. Hooks on the thinker's vision and audio encoders (PyTorch
forward pre-hooks and forward hooks, the documented extension point) pass only the distinct
items through and repeat each one's output rows back into the order the thinker merges them
in. Each item is encoded independently of the others (both encoders attend within an item),
so outputs equal the undeduplicated ones up to float rounding, and the gradients of repeated
items add up as if each copy had been encoded.

A call with arguments the hooks do not know (precomputed positions or sequence lengths) or
without repeats passes through untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

PLAN_ATTRIBUTE = "_omni_rl_media_plan"


@dataclass(frozen=True)
class DedupPlan:
    """Which distinct item each item of a call is, and the distinct items' sizes."""

    sources: tuple[int, ...]  # per item of the call: the index of its distinct item
    distinct: tuple[int, ...]  # per distinct item: its index among the call's items

    @property
    def has_repeats(self) -> bool:
        return len(self.distinct) < len(self.sources)


def plan_dedup(items: Sequence[Tensor], keys: Sequence[Any] | None = None) -> DedupPlan:
    """Group equal items: equal ``keys`` (an item's sizes, say), shapes and values; the
    candidates are found by their sums, then compared in full (no copies are made)."""
    keys = list(keys) if keys is not None else [None] * len(items)
    sums = torch.stack([item.float().sum() for item in items]).tolist() if items else []
    distinct: list[int] = []
    sources: list[int] = []
    for index, item in enumerate(items):
        for rank, first in enumerate(distinct):
            other = items[first]
            if (keys[first] == keys[index] and sums[first] == sums[index] and other.shape == item.shape
                    and torch.equal(other, item)):
                sources.append(rank)
                break
        else:
            sources.append(len(distinct))
            distinct.append(index)
    return DedupPlan(tuple(sources), tuple(distinct))


def repeat_rows(rows: Tensor, distinct_counts: Sequence[int], plan: DedupPlan, dim: int = 0) -> Tensor:
    """``rows`` holds each distinct item's output rows in turn (``distinct_counts`` of them);
    returns every item's rows in the call's order."""
    if sum(distinct_counts) != rows.shape[dim]:
        raise RuntimeError(
            f"An encoder returned {rows.shape[dim]} rows for distinct items of {list(distinct_counts)} rows "
            "(the row counts per item no longer follow the encoder's: update omni_qwen3.media_dedup)."
        )
    chunks = rows.split(list(distinct_counts), dim=dim)
    return torch.cat([chunks[source] for source in plan.sources], dim=dim)


def _pre_hook(sizes_key: str, dim: int, item_rows: Callable[[Tensor], list[int]]) -> Callable[..., Any]:
    """A pre-hook for an encoder called as ``encoder(rows, <sizes_key>=sizes)``: ``rows`` holds
    every item's rows along ``dim`` in turn, ``item_rows(sizes)`` says how many each."""

    def dedup_inputs(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]] | None:
        sizes = kwargs.get(sizes_key)
        if len(args) != 1 or sizes is None or set(kwargs) - {sizes_key, "return_dict"}:
            return None
        counts = item_rows(sizes)
        items = args[0].split(counts, dim=dim)
        plan = plan_dedup(items, keys=[str(size) for size in sizes.tolist()])
        if not plan.has_repeats:
            return None
        setattr(module, PLAN_ATTRIBUTE, (plan, [counts[i] for i in plan.distinct]))
        kept = torch.cat([items[i] for i in plan.distinct], dim=dim)
        return (kept,), {**kwargs, sizes_key: sizes[list(plan.distinct)]}

    return dedup_inputs


def _hook(repeat_outputs: Callable[[Any, Any, DedupPlan, list[int]], None]) -> Callable[..., Any]:
    """The forward hook matching :func:`_pre_hook`: when the pre-hook deduplicated the call,
    ``repeat_outputs(module, output, plan, distinct item sizes)`` puts every item back."""

    def repeat(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> Any:
        pending = module.__dict__.pop(PLAN_ATTRIBUTE, None)
        if pending is None:
            return None
        plan, counts = pending
        repeat_outputs(module, output, plan, counts)
        return output

    return repeat


def _repeat_vision(module: Any, output: Any, plan: DedupPlan, counts: list[int]) -> None:
    merged = [count // module.spatial_merge_size**2 for count in counts]
    output.last_hidden_state = repeat_rows(output.last_hidden_state, counts, plan)
    output.pooler_output = repeat_rows(output.pooler_output, merged, plan)
    output.deepstack_features = [repeat_rows(features, merged, plan) for features in output.deepstack_features]


def _repeat_audio(module: Any, output: Any, plan: DedupPlan, counts: list[int]) -> None:
    from omni_qwen3.compat import audio_output_lengths

    encoded = [int(n) for n in audio_output_lengths(torch.tensor(counts)).tolist()]
    output.last_hidden_state = repeat_rows(output.last_hidden_state, encoded, plan)


HOOKS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    # visual(patches [sum of t*h*w, D], grid_thw=[images, 3])
    "visual": (_pre_hook("grid_thw", 0, lambda grid: [int(t * h * w) for t, h, w in grid.tolist()]), _hook(_repeat_vision)),
    # audio_tower(mel frames [mel, sum of lengths], feature_lens=[audios])
    "audio_tower": (_pre_hook("feature_lens", 1, lambda lengths: [int(n) for n in lengths.tolist()]), _hook(_repeat_audio)),
}


def install_media_dedup(thinker: Any) -> None:
    """Hook the thinker's vision and audio encoders (see the module docstring)."""
    for name, (pre_hook, hook) in HOOKS.items():
        encoder = getattr(thinker, name)
        encoder.register_forward_pre_hook(pre_hook, with_kwargs=True)
        encoder.register_forward_hook(hook, with_kwargs=True)
