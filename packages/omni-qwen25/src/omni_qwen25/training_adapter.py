"""Training adapter for the Qwen2.5-Omni Thinker.

The checkpoint holds the thinker (text, vision and audio in; text out), the talker and the
token2wav vocoder (a DiT and a BigVGAN). RL trains the thinker only: the engines load
:class:`omni_qwen25.thinker_policy.Qwen25OmniThinkerPolicy`, which builds the thinker alone
(its forward and FSDP units are the thinker's; the checkpoint's top-level class has no
``forward`` of its own), and the encoders are frozen by default.

Nothing heavy is imported at module import: the entry point only registers the class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omni_contracts import TrainingAdapter
from omni_contracts.chat_template import load_chat_template

from omni_qwen25.rollout_adapter import PIPELINE

ARCHITECTURE = "Qwen2_5OmniForConditionalGeneration"

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
    modalities = ("text", "image", "audio", "video")

    def __init__(self, *, freeze_vision_tower: bool = True, freeze_audio_tower: bool = True) -> None:
        self.freeze_vision_tower = freeze_vision_tower
        self.freeze_audio_tower = freeze_audio_tower

    def policy_class(self, model_config: Any) -> Any:
        from omni_qwen25.thinker_policy import Qwen25OmniThinkerPolicy

        return Qwen25OmniThinkerPolicy

    def get_strip_modules(self, model_config: Any) -> Sequence[str]:
        return ()  # the policy class never builds the talker and token2wav

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
        from omni_qwen25.thinker_policy import Qwen25OmniThinkerPolicy

        if not isinstance(module, Qwen25OmniThinkerPolicy):
            raise TypeError(
                f"{type(self).__name__} trains Qwen25OmniThinkerPolicy (its policy_class), got "
                f"{type(module).__name__}; load the checkpoint with "
                "Qwen25OmniThinkerPolicy.from_pretrained(path)."
            )
        super().configure_model(module, model_config)
        if self.freeze_vision_tower:
            module.thinker.visual.requires_grad_(False)
        if self.freeze_audio_tower:
            module.thinker.audio_tower.requires_grad_(False)


def _thinker_config(model_config: Any) -> Any:
    thinker = getattr(model_config, "thinker_config", None)
    if thinker is None:
        raise ValueError(
            f"Expected a Qwen2_5OmniConfig with a thinker_config, got {type(model_config).__name__}."
        )
    return thinker

