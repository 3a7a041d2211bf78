"""What the engines call on an omni thinker's processor, by name.

:class:`OmniProcessor` declares what the engines call on the processor a training adapter's
``configure_processor`` returns (see ``docs/adding-a-model.md``) when its model takes media
(``TrainingAdapter.modalities``); both engines check it when they load the processor, and
``omni_contracts.testing.check_processor`` in a package's tests:

- ``pad_token_ids`` and ``dedup_pad_tokens``: the processor expands each image/video/audio
  placeholder to its feature length; vLLM(-Omni) expands it again, so prompts sent to the
  engine carry one pad per media item;
- ``get_rope_index`` and ``get_rope_index_kwargs``: the mrope positions, and the arguments
  beyond ids, grids and mask read from the processor's own output (verl's agent loop calls
  them by these names).

``omni_model_kit.thinker_processor.ThinkerProcessorMixin`` implements them for transformers'
Qwen-Omni processors. :func:`load_processor` is how every engine process gets one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from omni_contracts.errors import CheckpointError
from omni_contracts.training_adapter import TrainingAdapter


@runtime_checkable
class OmniProcessor(Protocol):
    """The processor an omni training adapter's ``configure_processor`` returns: a
    transformers processor (it templates and encodes prompts) with these members."""

    @property
    def pad_token_ids(self) -> Sequence[int]:
        """The placeholder ids the processor expands per media item (image, video, audio);
        never sampled in a response."""

    def dedup_pad_tokens(self, prompt_ids: Any) -> Any:
        """One pad per media item (a vLLM engine expands it again)."""

    def get_rope_index(self, *args: Any, **kwargs: Any) -> Any:
        """``(positions [3, batch, seq], deltas)`` as int64, computed as the model does."""

    def get_rope_index_kwargs(self, multi_modal_inputs: dict[str, Any]) -> dict[str, Any]:
        """``get_rope_index``'s arguments beyond ids, grids and mask."""


PROCESSOR_MEMBERS = ("pad_token_ids", "dedup_pad_tokens", "get_rope_index", "get_rope_index_kwargs")


def missing_processor_members(processor: object) -> list[str]:
    """The members of :class:`OmniProcessor` that ``processor``'s class lacks."""
    return [name for name in PROCESSOR_MEMBERS if not hasattr(type(processor), name)]


def require_omni_processor(processor: object, adapter: object) -> None:
    """What the engines call on loading a processor: refuse one that lacks a member of
    :class:`OmniProcessor` now, not when the member is first used. Only an adapter whose
    model takes media (``TrainingAdapter.takes_media()``) is held to it: a text-only model's
    processor may be its tokenizer, which templates and encodes prompts and expands nothing.

    Raises:
        TypeError: members are missing (named, with the fix).
    """
    if isinstance(adapter, TrainingAdapter) and not adapter.takes_media():
        return
    missing = missing_processor_members(processor)
    if missing:
        raise TypeError(
            f"{type(adapter).__name__}.configure_processor returned {type(processor).__name__}, which "
            f"lacks {missing}: a model that takes media ({', '.join(getattr(adapter, 'modalities', ()))}) "
            "needs every member of omni_contracts.OmniProcessor; omni_model_kit.thinker_processor."
            "ThinkerProcessorMixin implements them for a Qwen-Omni processor (a text-only model keeps "
            "the default modalities, ('text',), and may return its tokenizer)."
        )


PROBE_TEXT = "The quick brown fox counts 12 + 30 = 42."


def require_usable_tokenizer(tokenizer: Any, model_path: str) -> None:
    """Refuse a tokenizer that encodes plain text as nothing (or as unknown tokens only): the
    one transformers builds for a folder without its vocabulary, which would make every prompt
    empty and let the run "train" and exit 0.

    Raises:
        CheckpointError: the tokenizer has no vocabulary (a user error: exit status 2).
    """
    ids = list(tokenizer.encode(PROBE_TEXT, add_special_tokens=False))
    unknown = getattr(tokenizer, "unk_token_id", None)
    if not ids or all(token == unknown for token in ids):
        raise CheckpointError(
            f"The tokenizer loaded from {model_path} encodes {PROBE_TEXT!r} as {ids} ({len(tokenizer)} tokens in "
            "all): the directory lacks the tokenizer's vocabulary, so every prompt would be empty. Copy the "
            "model's tokenizer.json (or vocab.json and merges.txt) into it."
        )


def load_processor(adapter: TrainingAdapter, model_path: str, model_config: Any) -> Any:
    """The adapter's processor for the checkpoint, checked as every engine process checks it:
    the members the engines call (:func:`require_omni_processor`) and a tokenizer with its
    vocabulary (:func:`require_usable_tokenizer`).

    Raises:
        TypeError: the processor lacks members.
        CheckpointError: its tokenizer has no vocabulary.
    """
    processor = adapter.configure_processor(model_path, model_config)
    require_omni_processor(processor, adapter)
    require_usable_tokenizer(getattr(processor, "tokenizer", processor), model_path)
    return processor
