"""An image + text model package, written as a user writes one against omni_contracts'
public API only (no omni-rl model package or model kit): transformers' Qwen2-VL
(``Qwen2VLForConditionalGeneration``), trained whole (stage ``all``), reading text and
images, with a one-stage rollout adapter.

What a model that takes media owes the contract, written here from scratch:

- ``modalities = ("text", "image")``, so both engines hold its processor to
  ``omni_contracts.OmniProcessor``;
- that processor (:mod:`vision_lm_model.processor`): transformers' ``Qwen2VLProcessor`` with
  ``pad_token_ids``, ``dedup_pad_tokens``, ``get_rope_index`` (transformers' own) and
  ``get_rope_index_kwargs``.

The tests load it by name (``OMNI_RL_MODEL_MODULES=vision_lm_model`` with this folder's parent
on ``PYTHONPATH``), as a checkout that is not installed does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from omni_contracts import RolloutAdapter, StageConfig, TrainingAdapter

ARCHITECTURE = "Qwen2VLForConditionalGeneration"
PIPELINE = "vision_lm"


@TrainingAdapter.register(ARCHITECTURE, stage="all")
class VisionLMAdapter(TrainingAdapter):
    """Trains the whole Qwen2-VL model (its vision tower frozen by default)."""

    modalities = ("text", "image")
    rollout_pipeline = PIPELINE
    lora_target_modules = ("q_proj", "k_proj", "v_proj", "o_proj")
    lora_exclude_modules = r".*(visual|lm_head).*"
    options = ("freeze_vision_tower",)

    def __init__(self, freeze_vision_tower: bool = True) -> None:
        self.freeze_vision_tower = freeze_vision_tower

    def get_strip_modules(self, model_config: Any) -> Sequence[str]:
        return ()

    def configure_processor(self, model_path: str, model_config: Any) -> Any:
        from vision_lm_model.processor import VisionLMProcessor

        processor = VisionLMProcessor.from_pretrained(model_path)
        processor.bind_model_config(model_config)
        return processor

    def configure_tokenizer(self, model_path: str, model_config: Any) -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model_path)

    def configure_model(self, module: Any, model_config: Any) -> None:
        super().configure_model(module, model_config)
        if self.freeze_vision_tower:
            module.model.visual.requires_grad_(False)


@RolloutAdapter.register(PIPELINE)
class VisionLMRolloutAdapter(RolloutAdapter):
    """One stage: the whole model answers in text."""

    modes = ("text",)

    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        self.check_mode(mode)
        return [StageConfig(0, ARCHITECTURE, "text", final_output=True)]

    def rollout_flags(self, mode: str) -> Mapping[int, Mapping[str, object]]:
        self.check_mode(mode)
        return {}

    def get_pipeline_id(self, mode: str) -> str:
        self.check_mode(mode)
        return PIPELINE
