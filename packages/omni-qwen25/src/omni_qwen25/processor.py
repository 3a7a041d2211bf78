"""The Qwen2.5-Omni processor as the thinker's trainer needs it.

Adds to transformers' ``Qwen2_5OmniProcessor``:

- ``get_rope_index``: the thinker's 3-D (temporal, height, width) mrope positions, computed
  by transformers' own implementation from the thinker config, returned as **int64**.
  Qwen2.5-Omni's signature differs from Qwen3-Omni's only in what it reads from the
  config (``position_id_per_seconds``, ``seconds_per_chunk``); prompts with audio but no
  image or video take upstream's text path (sequential positions), as the model does;
- ``get_rope_index_kwargs``: the arguments beyond ids, grids and mask, read from the
  processor's own output (verl's agent loop calls it by this name);
- ``pad_token_ids`` and ``dedup_pad_tokens``: the processor expands each image/video/audio
  placeholder to its feature length; vLLM expands it again, so prompts sent to the engine
  carry one pad per media item.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Qwen2_5OmniProcessor
from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (
    Qwen2_5OmniPreTrainedModelForConditionalGeneration as _ThinkerPositions,
)

from omni_contracts.thinker_processor import ThinkerProcessorMixin, dedup_pad_tokens

REQUIRED_CONFIG_IDS = (
    "image_token_id", "video_token_id", "audio_token_id", "vision_start_token_id", "audio_start_token_id",
)


class _RopeIndexer:
    """Runs transformers' ``get_rope_index`` with a thinker config and no model.

    Upstream's implementation reads only ``config``, ``spatial_merge_size``,
    ``get_llm_pos_ids_for_vision`` and ``get_chunked_index`` from ``self`` (the talker
    calls it the same way); ``tests/test_processor.py`` checks the result against the
    thinker's own.
    """

    get_rope_index = _ThinkerPositions.get_rope_index
    get_llm_pos_ids_for_vision = _ThinkerPositions.get_llm_pos_ids_for_vision
    get_chunked_index = _ThinkerPositions.get_chunked_index

    def __init__(self, thinker_config: Any) -> None:
        self.config = thinker_config
        self.spatial_merge_size = thinker_config.vision_config.spatial_merge_size


class Qwen25OmniThinkerProcessor(ThinkerProcessorMixin, Qwen2_5OmniProcessor):
    """transformers' Qwen2.5-Omni processor, bound to the thinker config of its checkpoint
    (``bind_thinker_config``, ``pad_token_ids``, ``get_rope_index_kwargs`` and
    ``dedup_pad_tokens`` come from :class:`~omni_contracts.thinker_processor.ThinkerProcessorMixin`)."""

    required_config_ids = REQUIRED_CONFIG_IDS
    rope_indexer = _RopeIndexer

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
        """mrope positions ``[3, batch, seq]`` and deltas ``[batch, 1]``, both int64.

        ``audio_seqlens`` are the audio feature lengths (``feature_attention_mask.sum(-1)``);
        they set how many positions each audio item takes. ``second_per_grids`` (one per
        video, ``video_second_per_grid``) scales a video's temporal positions.
        """
        self._config()
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if second_per_grids is not None and not isinstance(second_per_grids, torch.Tensor):
            second_per_grids = torch.tensor(second_per_grids)
        positions, deltas = self._rope.get_rope_index(
            input_ids,
            image_grid_thw,
            video_grid_thw,
            attention_mask,
            use_audio_in_video,
            audio_seqlens,
            second_per_grids,
        )
        return positions.long(), deltas.long()

def load_processor(model_path: str, thinker_config: Any) -> Qwen25OmniThinkerProcessor:
    processor = Qwen25OmniThinkerProcessor.from_pretrained(model_path)
    processor.bind_thinker_config(thinker_config)
    return processor


__all__ = ["Qwen25OmniThinkerProcessor", "dedup_pad_tokens", "load_processor"]
