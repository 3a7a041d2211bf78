"""A text-only causal-LM model package, written as a user writes one against omni_contracts'
public API (and before media were part of the contract): a training adapter whose processor
is its tokenizer, and a one-stage rollout adapter. It declares no modalities: text only.

The tests load it by name (``OMNI_RL_MODEL_MODULES=text_lm_model`` with this folder's parent
on ``PYTHONPATH``), as a checkout that is not installed does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from omni_contracts import RolloutAdapter, StageConfig, TrainingAdapter

ARCHITECTURE = "Qwen2ForCausalLM"
PIPELINE = "text_lm"


@TrainingAdapter.register(ARCHITECTURE, stage="all")
class TextLMAdapter(TrainingAdapter):
    rollout_pipeline = PIPELINE
    lora_target_modules = ("q_proj", "v_proj")

    def get_strip_modules(self, model_config: Any) -> Sequence[str]:
        return ()

    def configure_processor(self, model_path: str, model_config: Any) -> Any:
        return self.configure_tokenizer(model_path, model_config)

    def configure_tokenizer(self, model_path: str, model_config: Any) -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model_path)


@RolloutAdapter.register(PIPELINE)
class TextLMRolloutAdapter(RolloutAdapter):
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
