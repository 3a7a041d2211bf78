"""The thinker of a Qwen3-Omni checkpoint as a model of its own: what the trainer loads.

Only ``thinker`` is built, so the talker and code2wav are neither allocated nor read from
the checkpoint; parameter names keep the checkpoint's ``thinker.`` prefix. Importing this
module imports transformers' Qwen3-Omni modelling code (tens of seconds cold): the training
adapter imports it only when a model is loaded.
"""

from __future__ import annotations

from transformers import GenerationMixin, Qwen3OmniMoeConfig
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
    Qwen3OmniMoePreTrainedModel,
    Qwen3OmniMoeThinkerForConditionalGeneration,
)

from omni_model_kit.thinker_policy import ThinkerPolicyMixin
from omni_qwen3.media_dedup import install_media_dedup
from omni_qwen3.token_ids import complete_thinker_config

THINKER_DECODER_LAYER = "Qwen3OmniMoeThinkerTextDecoderLayer"


class Qwen3OmniThinkerPolicy(ThinkerPolicyMixin, Qwen3OmniMoePreTrainedModel, GenerationMixin):
    """``Qwen3OmniMoeForConditionalGeneration`` without its speech stages. Its encoders see
    each distinct image and audio of a call once (:mod:`omni_qwen3.media_dedup`): a GRPO
    batch repeats every prompt's media ``n`` times."""

    config_class = Qwen3OmniMoeConfig
    thinker_class = Qwen3OmniMoeThinkerForConditionalGeneration
    thinker_decoder_layer = THINKER_DECODER_LAYER
    _keys_to_ignore_on_load_unexpected = [r"^talker\.", r"^code2wav\."]

    def __init__(self, config: Qwen3OmniMoeConfig) -> None:
        complete_thinker_config(config)  # ids kept outside thinker_config (omni_qwen3.token_ids)
        super().__init__(config)
        install_media_dedup(self.thinker)
