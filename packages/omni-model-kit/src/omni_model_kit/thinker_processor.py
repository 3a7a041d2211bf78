"""The members of ``omni_contracts.OmniProcessor`` for a transformers Qwen-Omni processor.

A model package mixes :class:`ThinkerProcessorMixin` into its transformers processor class
and sets :attr:`~ThinkerProcessorMixin.rope_indexer` to a :class:`RopeIndexer` subclass
holding transformers' own ``get_rope_index`` (and the helpers it calls); the training
adapter binds the checkpoint's thinker config (``bind_thinker_config``).

Light: torch is imported by the method that builds tensors; lists and tensors are otherwise
handled through their own methods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from omni_contracts.errors import CheckpointError

if TYPE_CHECKING:
    import torch


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


def fold_soundtracks(prompt_ids: Any, vision_start: int, audio_start: int, audio_end: int, vision_end: int,
                     video: int) -> Any:
    """Fold each video whose soundtrack the processor interleaved (``vision_start
    audio_start <frames and sound> audio_end vision_end``) back to the chat template's
    ``vision_start video vision_end``: what an engine's own processor, told
    ``use_audio_in_video``, expands again. A list or a 1-D tensor; the same kind comes back.
    """
    is_tensor = hasattr(prompt_ids, "new_tensor")
    values = [int(token) for token in (prompt_ids.tolist() if is_tensor else prompt_ids)]
    folded, i = [], 0
    while i < len(values):
        if values[i] == vision_start and values[i + 1:i + 2] == [audio_start]:
            end = next((j for j in range(i + 2, len(values) - 1)
                        if values[j] == audio_end and values[j + 1] == vision_end), None)
            if end is not None:
                folded += [vision_start, video, vision_end]
                i = end + 2
                continue
        folded.append(values[i])
        i += 1
    if len(folded) == len(values):
        return prompt_ids
    return prompt_ids.new_tensor(folded) if is_tensor else folded


def rope_index_kwargs(multi_modal_inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``get_rope_index``'s arguments beyond ids, mask and grids, exactly as a thinker's
    forward derives them: audio lengths from ``feature_attention_mask``,
    ``video_second_per_grid``, and ``use_audio_in_video`` (``True`` where the prompt's videos
    carry their soundtracks interleaved, as the dataset marks them)."""
    mask = multi_modal_inputs.get("feature_attention_mask")
    return {
        "audio_seqlens": mask.sum(-1) if mask is not None else None,
        "second_per_grids": multi_modal_inputs.get("video_second_per_grid"),
        "use_audio_in_video": bool(multi_modal_inputs.get("use_audio_in_video", False)),
    }


class RopeIndexer:
    """Runs transformers' ``get_rope_index`` with a thinker config and no model.

    Upstream's implementation reads only ``config``, ``spatial_merge_size`` and a few helper
    methods from ``self`` (transformers calls it the same way from the talker). A model
    package subclasses this with upstream's ``get_rope_index`` and those helpers as class
    attributes, and its tests compare the result with the thinker's own.
    """

    get_rope_index: Any

    def __init__(self, thinker_config: Any) -> None:
        self.config = thinker_config
        self.spatial_merge_size = thinker_config.vision_config.spatial_merge_size


class ThinkerProcessorMixin:
    """Binds a transformers processor to its checkpoint's thinker config and adds every
    member of ``omni_contracts.OmniProcessor``. A model package mixes it into its processor
    class and sets :attr:`required_config_ids` and :attr:`rope_indexer`."""

    required_config_ids: ClassVar[tuple[str, ...]] = ("image_token_id", "video_token_id", "audio_token_id")
    rope_indexer: ClassVar[type[RopeIndexer]]
    """The :class:`RopeIndexer` subclass that runs transformers' ``get_rope_index``."""
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
        self._rope = type(self).rope_indexer(thinker_config)

    def get_rope_index(
        self,
        input_ids: torch.Tensor,
        image_grid_thw: torch.Tensor | None = None,
        video_grid_thw: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        use_audio_in_video: bool = False,
        audio_seqlens: torch.Tensor | None = None,
        second_per_grids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """mrope positions ``[3, batch, seq]`` and deltas ``[batch, 1]``, both int64
        (transformers returns float32, which a bf16 cast would round).

        ``audio_seqlens`` are the audio feature lengths (``feature_attention_mask.sum(-1)``);
        they set how many positions each audio item takes. ``second_per_grids`` (one per
        video, ``video_second_per_grid``; a list is made a tensor) scales a video's temporal
        positions. ``use_audio_in_video`` is also taken as on when ``input_ids`` hold a video
        whose soundtrack is interleaved (a vision start followed by an audio start: the layout
        transformers' own ``get_rope_index`` lays such a block out by); verl's agent loop, which
        computes the actor's positions, never passes it.
        """
        import torch

        config = self._config()
        vision, audio = (getattr(config, name, None) for name in ("vision_start_token_id", "audio_start_token_id"))
        if not use_audio_in_video and vision is not None and audio is not None:
            use_audio_in_video = bool(((input_ids[..., :-1] == vision) & (input_ids[..., 1:] == audio)).any())
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if second_per_grids is not None and not isinstance(second_per_grids, torch.Tensor):
            second_per_grids = torch.tensor(second_per_grids)
        positions, deltas = self._rope.get_rope_index(
            input_ids, image_grid_thw, video_grid_thw, attention_mask, use_audio_in_video, audio_seqlens,
            second_per_grids,
        )
        return positions.long(), deltas.long()

    @property
    def pad_token_ids(self) -> tuple[int, int, int]:
        """The image, video and audio pad token ids."""
        config = self._config()
        return (config.image_token_id, config.video_token_id, config.audio_token_id)

    def get_rope_index_kwargs(self, multi_modal_inputs: dict[str, Any]) -> dict[str, Any]:
        """:func:`rope_index_kwargs` (verl's agent loop calls it by this name)."""
        return rope_index_kwargs(multi_modal_inputs)

    def dedup_pad_tokens(self, prompt_ids: Any) -> Any:
        """:func:`dedup_pad_tokens` with this checkpoint's image, video and audio pads, after
        :func:`fold_soundtracks` (a video with its soundtrack goes to the engine as one video
        placeholder, which the engine's processor interleaves again with ``use_audio_in_video``)."""
        tokens = [getattr(self, name, None) for name in
                  ("vision_bos_token", "audio_bos_token", "audio_eos_token", "vision_eos_token", "video_token")]
        if all(tokens):  # a processor that interleaves soundtracks names them all (Qwen-Omni's do)
            tokenizer = self.tokenizer  # type: ignore[attr-defined]  # the transformers processor's
            prompt_ids = fold_soundtracks(prompt_ids, *(tokenizer.convert_tokens_to_ids(t) for t in tokens))
        return dedup_pad_tokens(prompt_ids, self.pad_token_ids)

    def _config(self) -> Any:
        if self.thinker_config is None:
            raise RuntimeError(
                f"This {type(self).__name__} has no thinker config; load it through the model's "
                "training adapter's configure_processor."
            )
        return self.thinker_config


__all__ = ["RopeIndexer", "ThinkerProcessorMixin", "dedup_pad_tokens", "fold_soundtracks", "rope_index_kwargs"]
