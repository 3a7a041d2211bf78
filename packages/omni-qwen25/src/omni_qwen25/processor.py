"""The Qwen2.5-Omni processor as the thinker's trainer needs it: transformers'
``Qwen2_5OmniProcessor`` with the members the engines call by name (the model kit's
:class:`~omni_model_kit.thinker_processor.ThinkerProcessorMixin`), its mrope positions
computed by transformers' own implementation. Qwen2.5-Omni's ``get_rope_index`` reads
``position_id_per_seconds`` and ``seconds_per_chunk`` from the config and calls
``get_chunked_index``; prompts with audio but no image or video take upstream's text path
(sequential positions), as the model does.
"""

from __future__ import annotations

from transformers import Qwen2_5OmniProcessor
from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (
    Qwen2_5OmniPreTrainedModelForConditionalGeneration as _ThinkerPositions,
)

from omni_model_kit.thinker_processor import RopeIndexer, ThinkerProcessorMixin


class _RopeIndexer(RopeIndexer):
    get_rope_index = _ThinkerPositions.get_rope_index
    get_llm_pos_ids_for_vision = _ThinkerPositions.get_llm_pos_ids_for_vision
    get_chunked_index = _ThinkerPositions.get_chunked_index


class Qwen25OmniThinkerProcessor(ThinkerProcessorMixin, Qwen2_5OmniProcessor):
    """transformers' Qwen2.5-Omni processor, bound to the thinker config of its checkpoint."""

    required_config_ids = (
        "image_token_id", "video_token_id", "audio_token_id", "vision_start_token_id", "audio_start_token_id",
    )
    rope_indexer = _RopeIndexer
