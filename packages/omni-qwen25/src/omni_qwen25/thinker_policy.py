"""The thinker of a Qwen2.5-Omni checkpoint as a model of its own: what the trainer loads.

Only ``thinker`` is built, so the talker and token2wav are neither allocated nor read from
the checkpoint; parameter names keep the checkpoint's ``thinker.`` prefix. (The checkpoint's
top-level class has no ``forward`` at all.) Importing this module imports transformers'
Qwen2.5-Omni modelling code: the training adapter imports it only when a model is loaded.
"""

from __future__ import annotations

from transformers import GenerationMixin, Qwen2_5OmniConfig
from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import (
    Qwen2_5OmniPreTrainedModel,
    Qwen2_5OmniThinkerForConditionalGeneration,
)

from omni_model_kit.thinker_policy import ThinkerPolicyMixin

THINKER_DECODER_LAYER = "Qwen2_5OmniDecoderLayer"


class Qwen25OmniThinkerPolicy(ThinkerPolicyMixin, Qwen2_5OmniPreTrainedModel, GenerationMixin):
    """``Qwen2_5OmniForConditionalGeneration`` without its speech stages."""

    config_class = Qwen2_5OmniConfig
    thinker_class = Qwen2_5OmniThinkerForConditionalGeneration
    thinker_decoder_layer = THINKER_DECODER_LAYER
    _keys_to_ignore_on_load_unexpected = [r"^talker\.", r"^token2wav\."]
