"""Shared pieces of the model packages' vLLM plugins that move a thinker's positions after a video
with its soundtrack onto transformers' (``omni_qwen3.vllm_positions``,
``omni_qwen25.vllm_soundtrack``).

vLLM offers no hook for a model's position rule, so each plugin wraps its thinker's
``get_mrope_input_positions`` with :func:`with_corrected_positions` and a correction of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Block = tuple[int, int, int]
"""``(offset, count, placeholder_length)`` of a video-with-soundtrack block, as vLLM reads it."""
Correction = Callable[[np.ndarray, Sequence[int], Sequence[Block]], np.ndarray]
"""vLLM's positions ([3, L]), the prompt's ids and its blocks -> transformers' positions."""


def trailing_run(tokens: Sequence[int]) -> int:
    """How many tokens at the end of ``tokens`` equal its last one (the block's last chunk:
    transformers starts what follows one past its largest position)."""
    run = 1
    while run < len(tokens) and tokens[-1 - run] == tokens[-1]:
        run += 1
    return run


def interleaved_blocks(model: Any, mm_features: Any) -> list[Block]:
    """Each video-with-soundtrack block, as vLLM-Omni's thinker reads its features
    (``iter_mm_features``; the count of frame and audio tokens from its own
    ``_compute_interleaved_positions``; the placeholder's length from the feature)."""
    lengths = {int(feature.mm_position.offset): int(feature.mm_position.length) for feature in mm_features}
    blocks = []
    for offset, modality, data in model.iter_mm_features(mm_features):
        if modality == "video" and data.get("use_audio_in_video"):
            _, count = model._compute_interleaved_positions(0, data)
            blocks.append((int(offset), int(count), lengths.get(int(offset), int(count))))
    return blocks


def with_corrected_positions(
    original: Callable[..., tuple[Any, int]], correct: Correction, mark: str
) -> Callable[..., tuple[Any, int]]:
    """``get_mrope_input_positions`` whose positions around each interleaved block are
    ``correct``'s (the position delta recomputed as vLLM computes it); ``mark`` is set on it, so
    a plugin registered twice in one process wraps once."""
    import torch

    @functools.wraps(original)  # upstream's stays reachable as __wrapped__ (the canary tests call it)
    def get_mrope_input_positions(
        self: Any, input_tokens: list[int], mm_features: Any, **kwargs: Any
    ) -> tuple[Any, int]:
        positions, delta = original(self, input_tokens, mm_features, **kwargs)
        blocks = interleaved_blocks(self, mm_features)
        if not blocks:
            return positions, delta
        fixed = correct(positions.numpy(), input_tokens, blocks)
        return torch.from_numpy(fixed), int(fixed.max()) + 1 - len(input_tokens)

    setattr(get_mrope_input_positions, mark, True)
    return get_mrope_input_positions
