"""Multimodal placeholder tokens: the ids a policy must never sample.

A sampled ``<|image_pad|>`` or ``<|audio_pad|>`` has no medium behind it; the next forward
pass finds one placeholder more than it has features and fails (or, worse, mis-pairs the
features of a whole micro-batch). Both engines ban the same set: the local engine
suppresses them in sampling, the verl engine masks them in vLLM-Omni's policy stage.
"""

from __future__ import annotations

from typing import Any

PLACEHOLDER_TOKEN_ATTRIBUTES = (
    "image_token", "video_token", "audio_token",
    "vision_bos_token", "vision_eos_token", "audio_bos_token", "audio_eos_token",
)
"""Token-string attributes a transformers tokenizer or processor declares for its media."""


def placeholder_token_ids(*holders: Any) -> tuple[int, ...]:
    """Ids of every placeholder token declared by the given tokenizers or processors.

    A processor is read together with its tokenizer (``processor.tokenizer``), and a
    ``pad_token_ids`` property (omni-qwen3's processor: image, video, audio pads) is honoured.
    """
    ids: set[int] = set()
    for holder in holders:
        if holder is None:
            continue
        tokenizer = getattr(holder, "tokenizer", holder)
        for source in {id(holder): holder, id(tokenizer): tokenizer}.values():
            for attribute in PLACEHOLDER_TOKEN_ATTRIBUTES:
                token = getattr(source, attribute, None)
                if isinstance(token, str):
                    token_id = tokenizer.convert_tokens_to_ids(token)
                    if isinstance(token_id, int) and token_id != getattr(tokenizer, "unk_token_id", None):
                        ids.add(token_id)
        if holder is not tokenizer:  # a tokenizer answers any ``*_ids`` attribute itself
            declared = getattr(holder, "pad_token_ids", None)
            if isinstance(declared, (list, tuple)):
                ids.update(int(i) for i in declared)
    return tuple(sorted(ids))
