"""Training adapter for the Qwen2.5-Omni Thinker.

The checkpoint holds the thinker (text, vision and audio in; text out), the talker and the
token2wav vocoder (a DiT and a BigVGAN). RL trains the thinker only: the speech components
are deleted before FSDP wrapping, the top-level forward and embedding accessors point at
the thinker (the top-level class has no ``forward`` of its own), FSDP shards at the
thinker's decoder layers, and the encoders are frozen by default.

Nothing heavy is imported at module import: the entry point only registers the class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omni_contracts import TrainingAdapter
from omni_contracts.chat_template import load_chat_template

from omni_qwen25.rollout_adapter import PIPELINE

ARCHITECTURE = "Qwen2_5OmniForConditionalGeneration"
THINKER_DECODER_LAYER = "Qwen2_5OmniDecoderLayer"
SPEECH_MODULES = ("talker", "token2wav")

# LoRA defaults: attention projections of the thinker's text decoder; never the heads, the
# encoders (the audio tower has q/k/v_proj too) or the speech stages.
LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
LORA_EXCLUDE_MODULES = r".*(visual|audio_tower|lm_head|talker|token2wav).*"


@TrainingAdapter.register(ARCHITECTURE, stage="thinker")
class Qwen25OmniThinkerAdapter(TrainingAdapter):
    """Trains the thinker of ``Qwen2_5OmniForConditionalGeneration``.

    Args:
        freeze_vision_tower: keep the vision encoder's weights fixed (default).
        freeze_audio_tower: keep the audio encoder's weights fixed (default).
    """

    lora_target_modules = LORA_TARGET_MODULES
    lora_exclude_modules = LORA_EXCLUDE_MODULES
    options = ("freeze_vision_tower", "freeze_audio_tower")
    rollout_pipeline = PIPELINE

    def __init__(self, *, freeze_vision_tower: bool = True, freeze_audio_tower: bool = True) -> None:
        self.freeze_vision_tower = freeze_vision_tower
        self.freeze_audio_tower = freeze_audio_tower

    def get_strip_modules(self, model_config: Any) -> Sequence[str]:
        # Without audio output the model builds no talker or token2wav to strip.
        return SPEECH_MODULES if getattr(model_config, "enable_audio_output", True) else ()

    def configure_processor(self, model_path: str, model_config: Any) -> Any:
        from omni_qwen25.processor import load_processor

        return load_processor(model_path, _thinker_config(model_config))

    def configure_tokenizer(self, model_path: str, model_config: Any) -> Any:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_path)
        if not tokenizer.chat_template:
            tokenizer.chat_template = load_chat_template(model_path)
        return tokenizer

    def configure_model(self, module: Any, model_config: Any) -> None:
        super().configure_model(module, model_config)
        thinker = module.thinker
        module.has_talker = False  # upstream's own flag for a model without talker/token2wav
        # The trained policy is the thinker: the top-level forward (which FSDP, PEFT and
        # the actor call) and the embedding accessors (PEFT, resizing) resolve to it.
        module.forward = thinker.forward
        module.get_input_embeddings = thinker.get_input_embeddings
        module.set_input_embeddings = thinker.set_input_embeddings
        module.get_output_embeddings = thinker.get_output_embeddings
        module._no_split_modules = [decoder_layer_class_name()]
        if self.freeze_vision_tower:
            thinker.visual.requires_grad_(False)
        if self.freeze_audio_tower:
            thinker.audio_tower.requires_grad_(False)


def decoder_layer_class_name() -> str:
    """The thinker's text decoder layer class, checked to exist in transformers."""
    from transformers.models.qwen2_5_omni import modeling_qwen2_5_omni

    if not hasattr(modeling_qwen2_5_omni, THINKER_DECODER_LAYER):
        raise RuntimeError(
            f"transformers {_transformers_version()} has no {THINKER_DECODER_LAYER} in "
            "modeling_qwen2_5_omni; FSDP could not shard the thinker by layer. Update "
            "omni_qwen25.training_adapter.THINKER_DECODER_LAYER for this version."
        )
    return THINKER_DECODER_LAYER


def _thinker_config(model_config: Any) -> Any:
    thinker = getattr(model_config, "thinker_config", None)
    if thinker is None:
        raise ValueError(
            f"Expected a Qwen2_5OmniConfig with a thinker_config, got {type(model_config).__name__}."
        )
    return thinker


def _transformers_version() -> str:
    import transformers

    return str(transformers.__version__)
