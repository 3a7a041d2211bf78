"""Where a Qwen3-Omni checkpoint keeps the multimodal token ids its thinker reads.

The thinker finds its media and computes mrope positions with ``image_token_id``,
``video_token_id``, ``audio_token_id``, ``vision_start_token_id`` and ``audio_start_token_id``,
read from its own config. Checkpoints do not all write them there: transformers'
``Qwen3OmniMoeThinkerConfig`` declares no ``vision_start_token_id`` (its talker config does),
so a checkpoint saved from a default config -- verl-omni's ``build_qwen3_omni_tiny_random.py``
-- has it in ``talker_config`` only, which is where verl-omni reads it. Each id is looked up
in ``thinker_config``, then ``talker_config``, then at the top level of the config, and
:func:`complete_thinker_config` writes the ones found elsewhere onto the thinker config, so the
processor's positions and the model's own forward use the same ids.

Light: no transformers import; configs are read by attribute (a loaded config) or by key
(``config.json`` as written, in the pre-flight).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omni_contracts import CheckpointError

THINKER_TOKEN_IDS = ("image_token_id", "video_token_id", "audio_token_id", "vision_start_token_id", "audio_start_token_id")
"""The ids the thinker's positions and media placement read from its config."""

SOURCES = ("thinker_config", "talker_config", None)
"""Where each id is looked for, in order (``None``: the top level of the config)."""

TOKENS = {
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
    "audio_token_id": "<|audio_pad|>",
    "vision_start_token_id": "<|vision_start|>",
    "audio_start_token_id": "<|audio_start|>",
}
"""The Qwen3-Omni token each id stands for (named in the fix a refusal suggests)."""


def find_token_id(model_config: Any, name: str) -> tuple[int, str] | None:
    """``(id, where)`` of the first of ``thinker_config``, ``talker_config`` and the top level
    that sets ``name``, or ``None``. ``model_config`` is a loaded config or ``config.json``
    parsed (a mapping)."""
    for source in SOURCES:
        holder = model_config if source is None else _get(model_config, source)
        value = _get(holder, name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value, source or "the top level"
    return None


def missing_token_ids(model_config: Any) -> list[str]:
    """The :data:`THINKER_TOKEN_IDS` set in none of the places :func:`find_token_id` looks."""
    return [name for name in THINKER_TOKEN_IDS if find_token_id(model_config, name) is None]


def token_id_problems(config_json: Mapping[str, Any], added_tokens: Mapping[str, int]) -> list[str]:
    """The pre-flight's view of ``config.json`` as written: one line per id set nowhere.

    A config class's defaults do not count: they are the released model's ids, wrong for any
    other tokenizer (a wrong media id silently drops the features). ``added_tokens`` (the
    tokenizer's special tokens and ids) lets the message give the value to write.
    """
    problems = []
    for name in missing_token_ids(config_json):
        token = TOKENS[name]
        value = added_tokens.get(token)
        fix = f"{value}, the tokenizer's id of {token}" if value is not None else f"the tokenizer's id of {token}"
        problems.append(
            f"config.json sets no {name} (looked in thinker_config, talker_config and at the top level); "
            f"the thinker needs it to place media and compute positions. Add \"{name}\": {fix}, to its "
            "thinker_config"
        )
    return problems


def complete_thinker_config(model_config: Any) -> Any:
    """``model_config.thinker_config`` with every :data:`THINKER_TOKEN_IDS` id set, those it
    lacks copied from where :func:`find_token_id` finds them (in place: the thinker built
    from it and the processor bound to it then agree).

    Raises:
        CheckpointError: ``model_config`` has no thinker config, or an id is set nowhere.
    """
    thinker = getattr(model_config, "thinker_config", None)
    if thinker is None:
        raise CheckpointError(
            f"Expected a Qwen3OmniMoeConfig with a thinker_config, got {type(model_config).__name__}; "
            "is actor_rollout_ref.model.path a Qwen3-Omni checkpoint?"
        )
    missing = []
    for name in THINKER_TOKEN_IDS:
        found = find_token_id(model_config, name)
        if found is None:
            missing.append(name)
        elif getattr(thinker, name, None) is None:
            setattr(thinker, name, found[0])
    if missing:
        raise CheckpointError(
            f"The checkpoint's config sets none of {missing} (looked in thinker_config, talker_config and "
            "at the top level); add each to thinker_config in its config.json, with the tokenizer's id of "
            f"{', '.join(TOKENS[name] for name in missing)}."
        )
    return thinker


def _get(holder: Any, name: str) -> Any:
    if holder is None:
        return None
    if isinstance(holder, Mapping):
        return holder.get(name)
    return getattr(holder, name, None)


__all__ = [
    "SOURCES",
    "THINKER_TOKEN_IDS",
    "complete_thinker_config",
    "find_token_id",
    "missing_token_ids",
    "token_id_problems",
]
