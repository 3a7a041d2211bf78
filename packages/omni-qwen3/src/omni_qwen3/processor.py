"""The Qwen3-Omni processor as the thinker's trainer needs it.

Adds two things to transformers' ``Qwen3OmniMoeProcessor``:

- ``get_rope_index``: the thinker's 3-D (temporal, height, width) mrope positions, computed
  by transformers' own implementation from the thinker config, returned as **int64**
  (transformers returns float32, which a bf16 cast would round).
- ``dedup_pad_tokens``: collapses each run of one multimodal pad token to a single token.
  The processor expands each image/video/audio placeholder to its feature length; vLLM
  expands it again, so prompts sent to the engine must carry one pad per media item.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Qwen3OmniMoeProcessor
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
    Qwen3OmniMoePreTrainedModelForConditionalGeneration as _ThinkerPositions,
)

from omni_contracts.thinker_processor import ThinkerProcessorMixin, dedup_pad_tokens


class _RopeIndexer:
    """Runs transformers' ``get_rope_index`` with a thinker config and no model.

    Upstream's implementation only reads ``config``, ``spatial_merge_size`` and
    ``get_llm_pos_ids_for_vision`` from ``self`` (transformers itself calls it this way
    from the talker); ``tests/test_processor.py`` checks the result against the model's.
    """

    get_rope_index = _ThinkerPositions.get_rope_index
    get_llm_pos_ids_for_vision = _ThinkerPositions.get_llm_pos_ids_for_vision

    def __init__(self, thinker_config: Any) -> None:
        self.config = thinker_config
        self.spatial_merge_size = thinker_config.vision_config.spatial_merge_size


class Qwen3OmniThinkerProcessor(ThinkerProcessorMixin, Qwen3OmniMoeProcessor):
    """transformers' Qwen3-Omni processor, bound to the thinker config of its checkpoint
    (``bind_thinker_config``, ``pad_token_ids``, ``get_rope_index_kwargs`` and
    ``dedup_pad_tokens`` come from :class:`~omni_contracts.thinker_processor.ThinkerProcessorMixin`)."""

    required_config_ids = ("image_token_id", "video_token_id", "audio_token_id", "vision_start_token_id")
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
        they set how many positions each audio item takes.
        """
        self._config()
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
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


def load_processor(model_path: str, thinker_config: Any) -> Qwen3OmniThinkerProcessor:
    processor = Qwen3OmniThinkerProcessor.from_pretrained(model_path)
    processor.bind_thinker_config(thinker_config)
    return processor


__all__ = ["Qwen3OmniThinkerProcessor", "dedup_pad_tokens", "load_processor"]
