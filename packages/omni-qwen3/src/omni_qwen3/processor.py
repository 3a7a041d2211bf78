"""The Qwen3-Omni processor as the thinker's trainer needs it: transformers'
``Qwen3OmniMoeProcessor`` with the members the engines call by name (the model kit's
:class:`~omni_model_kit.thinker_processor.ThinkerProcessorMixin`), its mrope positions
computed by transformers' own implementation.
"""

from __future__ import annotations

from transformers import Qwen3OmniMoeProcessor
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
    Qwen3OmniMoePreTrainedModelForConditionalGeneration as _ThinkerPositions,
)

from omni_model_kit.thinker_processor import RopeIndexer, ThinkerProcessorMixin


class _RopeIndexer(RopeIndexer):
    get_rope_index = _ThinkerPositions.get_rope_index
    get_llm_pos_ids_for_vision = _ThinkerPositions.get_llm_pos_ids_for_vision


class Qwen3OmniThinkerProcessor(ThinkerProcessorMixin, Qwen3OmniMoeProcessor):
    """transformers' Qwen3-Omni processor, bound to the thinker config of its checkpoint."""

    required_config_ids = ("image_token_id", "video_token_id", "audio_token_id", "vision_start_token_id")
    rope_indexer = _RopeIndexer
