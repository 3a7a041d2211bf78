"""Training adapter for the Qwen3-Omni Talker: RL on codec-0 of the speech output.

The engines load :class:`omni_qwen3.talker_policy.Qwen3OmniTalkerPolicy` (the whole
checkpoint: generation needs the thinker, the code predictor and code2wav); only the
talker's decoder and codec head train. A sample's codec-0 tokens are its response; what the
talker consumed travels in the ``qwen3_omni.*`` extra fields below, so the actor recomputes
the log-probs teacher-forced without running the thinker or the code predictor again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from omni_contracts import TrainingAdapter
from omni_contracts.training_adapter import micro_batch_rows

from omni_qwen3.rollout_adapter import PIPELINE
from omni_qwen3.talker_fields import (  # noqa: F401  (re-exported: the adapter's field names)
    PREFILL_EMBEDS,
    PREFILL_POSITIONS,
    RESIDUAL_CODES,
    SOURCE_IDS,
    TALKER_FIELDS,
    TRAILING_TEXT,
    TTS_PAD_EMBED,
    check_conditioning,
)
from omni_qwen3.training_adapter import ARCHITECTURE, Qwen3OmniThinkerAdapter

# LoRA defaults: the talker decoder's attention. The thinker, the code predictor (its
# q/k/v/o share the names) and code2wav stay frozen.
LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
LORA_EXCLUDE_MODULES = r".*(thinker|code_predictor|code2wav).*"
FROZEN = ("thinker", "talker.code_predictor", "code2wav", "talker.text_projection", "talker.hidden_projection")


@TrainingAdapter.register(ARCHITECTURE, stage="talker")
class Qwen3OmniTalkerAdapter(TrainingAdapter):
    """Trains codec-0 of ``Qwen3OmniMoeForConditionalGeneration``'s talker."""

    lora_target_modules = LORA_TARGET_MODULES
    lora_exclude_modules = LORA_EXCLUDE_MODULES
    rollout_pipeline = PIPELINE
    modalities = ("text", "image", "audio", "video")
    extra_field_specs = TALKER_FIELDS

    def policy_class(self, model_config: Any) -> Any:
        from omni_qwen3.talker_policy import Qwen3OmniTalkerPolicy

        return Qwen3OmniTalkerPolicy

    def prepare_model_inputs(
        self, model_inputs: dict[str, Any], micro_batch: Mapping[str, Any], model_config: Any
    ) -> dict[str, Any]:
        """The declared fields checked and passed on, and each row's conditioning complete in
        one of its two forms (see :mod:`omni_qwen3.talker_fields`)."""
        prepared = super().prepare_model_inputs(model_inputs, micro_batch, model_config)
        for index, fields in enumerate(micro_batch_rows(micro_batch, self.extra_field_specs)):
            check_conditioning(fields, f"micro-batch row {index}")
        return prepared

    def get_strip_modules(self, model_config: Any) -> Sequence[str]:
        return ()  # generation needs every stage

    def checkpoint_problems(self, model_path: str, model_config: Mapping[str, Any]) -> list[str]:
        return Qwen3OmniThinkerAdapter().checkpoint_problems(model_path, model_config)

    def configure_processor(self, model_path: str, model_config: Any) -> Any:
        return Qwen3OmniThinkerAdapter().configure_processor(model_path, model_config)

    def configure_tokenizer(self, model_path: str, model_config: Any) -> Any:
        return Qwen3OmniThinkerAdapter().configure_tokenizer(model_path, model_config)

    def configure_model(self, module: Any, model_config: Any) -> None:
        from omni_qwen3.talker_policy import Qwen3OmniTalkerPolicy

        if not isinstance(module, Qwen3OmniTalkerPolicy):
            raise TypeError(
                f"{type(self).__name__} trains Qwen3OmniTalkerPolicy (its policy_class), got "
                f"{type(module).__name__}; load the checkpoint with Qwen3OmniTalkerPolicy.from_pretrained(path)."
            )
        super().configure_model(module, model_config)
        for path in FROZEN:
            module.get_submodule(path).requires_grad_(False)
