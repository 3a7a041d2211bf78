"""What every omni thinker's processor adds for the engines, shared by the model packages.

:class:`OmniProcessor` declares what the engines call on the processor a training adapter's
``configure_processor`` returns (see ``docs/adding-a-model.md``) when its model takes media
(``TrainingAdapter.modalities``); both engines check it when they load the processor, and
``omni_contracts.testing.check_processor`` in a package's tests:

- ``pad_token_ids`` and ``dedup_pad_tokens``: the processor expands each image/video/audio
  placeholder to its feature length; vLLM(-Omni) expands it again, so prompts sent to the
  engine carry one pad per media item;
- ``get_rope_index_kwargs``: the mrope arguments beyond ids, grids and mask, read from the
  processor's own output (verl's agent loop calls it by this name);
- ``get_rope_index`` itself stays with each model package (it wraps transformers' own).

Light: no torch import; tensors are handled through their own methods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from omni_contracts.errors import CheckpointError
from omni_contracts.training_adapter import TrainingAdapter


@runtime_checkable
class OmniProcessor(Protocol):
    """The processor an omni training adapter's ``configure_processor`` returns: a
    transformers processor (it templates and encodes prompts) with these members.
    :class:`ThinkerProcessorMixin` supplies all but ``get_rope_index``."""

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
            "needs every member of omni_contracts.OmniProcessor. Mix in "
            "omni_contracts.thinker_processor.ThinkerProcessorMixin and define get_rope_index "
            "(a text-only model keeps the default modalities, ('text',), and may return its tokenizer)."
        )


def dedup_pad_tokens(prompt_ids: Any, pad_token_ids: Iterable[int]) -> Any:
    """Collapse runs of the same pad token (one of ``pad_token_ids``) to one token.

    Other tokens, and adjacent pads of different kinds, are kept. Accepts a list of ints or
    a 1-D tensor and returns the same kind (a tensor keeps its dtype and device).

    Raises:
        ValueError: a batch (a tensor of more than one dimension) was passed.
    """
    is_tensor = hasattr(prompt_ids, "new_tensor")
    if is_tensor and prompt_ids.dim() != 1:
        raise ValueError(f"dedup_pad_tokens takes one sequence (1-D), got shape {tuple(prompt_ids.shape)}.")
    values = [int(token) for token in (prompt_ids.tolist() if is_tensor else prompt_ids)]
    if not values:
        return prompt_ids
    pads = set(pad_token_ids)
    kept = [values[0]] + [token for prev, token in zip(values, values[1:]) if not (token == prev and token in pads)]
    return prompt_ids.new_tensor(kept) if is_tensor else kept


def rope_index_kwargs(multi_modal_inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``get_rope_index``'s arguments beyond ids, mask and grids, exactly as a thinker's
    forward derives them: audio lengths from ``feature_attention_mask``,
    ``video_second_per_grid``, and ``use_audio_in_video=False`` (audio tracks of videos are
    not used)."""
    mask = multi_modal_inputs.get("feature_attention_mask")
    return {
        "audio_seqlens": mask.sum(-1) if mask is not None else None,
        "second_per_grids": multi_modal_inputs.get("video_second_per_grid"),
        "use_audio_in_video": False,
    }


class ThinkerProcessorMixin:
    """Binds a transformers processor to its checkpoint's thinker config and adds the
    engine-facing pieces above. A model package mixes it into its processor class and sets
    :attr:`required_config_ids` and :attr:`rope_indexer` (a class taking the thinker config
    whose ``get_rope_index`` is transformers' own)."""

    required_config_ids: ClassVar[tuple[str, ...]] = ("image_token_id", "video_token_id", "audio_token_id")
    rope_indexer: ClassVar[Any] = None
    thinker_config: Any = None

    def bind_thinker_config(self, thinker_config: Any) -> None:
        """Bind the thinker config whose ids the processor computes positions with.

        Raises:
            CheckpointError: a :attr:`required_config_ids` id is unset (a user error: the
                trainer exits with status 2, naming it).
        """
        missing = [name for name in self.required_config_ids if getattr(thinker_config, name, None) is None]
        if missing:
            raise CheckpointError(
                f"The thinker config lacks {missing}; rope positions cannot be computed. "
                "Set them from the tokenizer's ids in the checkpoint's config.json."
            )
        self.thinker_config = thinker_config
        self._rope: Any = type(self).rope_indexer(thinker_config)

    @property
    def pad_token_ids(self) -> tuple[int, int, int]:
        """The image, video and audio pad token ids."""
        config = self._config()
        return (config.image_token_id, config.video_token_id, config.audio_token_id)

    def get_rope_index_kwargs(self, multi_modal_inputs: dict[str, Any]) -> dict[str, Any]:
        """:func:`rope_index_kwargs` (verl's agent loop calls it by this name)."""
        return rope_index_kwargs(multi_modal_inputs)

    def dedup_pad_tokens(self, prompt_ids: Any) -> Any:
        """:func:`dedup_pad_tokens` with this checkpoint's image, video and audio pads."""
        return dedup_pad_tokens(prompt_ids, self.pad_token_ids)

    def _config(self) -> Any:
        if self.thinker_config is None:
            raise RuntimeError(
                f"This {type(self).__name__} has no thinker config; load it through the model's "
                "training adapter's configure_processor."
            )
        return self.thinker_config
