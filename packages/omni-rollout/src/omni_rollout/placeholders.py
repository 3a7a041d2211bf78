"""Multimodal placeholder tokens: the ids a policy must never sample.

A sampled ``<|image_pad|>`` or ``<|audio_pad|>`` has no medium behind it; the next forward
pass finds one placeholder more than it has features and fails (or, worse, mis-pairs the
features of a whole micro-batch). Both engines ban the same set (:func:`policy_logit_mask`):
the local engine suppresses them in sampling, the verl engine masks them in vLLM-Omni's
policy stage, and the actor masks them in its forward (``omni_training.logit_mask``), so it
scores the distribution that was sampled.
"""

from __future__ import annotations

from typing import Any

from omni_contracts import LogitMask, RolloutAdapter

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


def banned_token_ids(processor: Any) -> list[int]:
    """Every multimodal placeholder the policy must never sample (image, video, audio pads
    and media delimiters), where verl bans only image and video pads."""
    return list(placeholder_token_ids(processor))


def policy_logit_mask(adapter: RolloutAdapter, mode: str, hf_config: Any, processor: Any, tokenizer: Any) -> LogitMask:
    """What the policy stage masks: the rollout adapter's answer for ``mode``, given
    the mask of a text policy (the tokenizer's length, :func:`banned_token_ids`). A talker
    policy gets its own codec vocabulary and bans, never the thinker's placeholders.

    A placeholder id at or past the tokenizer's length cannot be sampled, so it is not banned:
    a checkpoint saved from transformers' default config with a small tokenizer (verl-omni's
    tiny one) keeps the released model's media ids (151646-151656) beside a few hundred tokens."""
    width = len(tokenizer)
    text = LogitMask(width, tuple(i for i in banned_token_ids(processor) if i < width))
    return adapter.policy_logit_mask(mode, hf_config, text)
