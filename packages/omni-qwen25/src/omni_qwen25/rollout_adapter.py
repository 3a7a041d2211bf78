"""Rollout adapter for Qwen2.5-Omni, pipeline ``qwen2_5_omni``.

Two modes, each a pipeline vLLM-Omni 0.28 registers itself
(``vllm_omni/model_executor/models/qwen2_5_omni/pipeline.py``): ``thinker_only`` (stage 0,
text; what RL on the thinker uses; ``qwen2_5_omni_thinker_only``) and ``full`` (thinker ->
talker -> code2wav, a waveform out; ``qwen2_5_omni``). The topology is this package's own
definition below, so the local engine never imports vLLM-Omni; a gpu-extra test checks
that it agrees with vLLM-Omni's pipeline definitions.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

from omni_contracts import RolloutAdapter, StageConfig

PIPELINE = "qwen2_5_omni"
THINKER_ARCH = "Qwen2_5OmniThinkerForConditionalGeneration"
TALKER_ARCH = "Qwen2_5OmniTalkerForConditionalGeneration"
TOKEN2WAV_ARCH = "Qwen2_5OmniToken2WavModel"
STAGE_ARCHES = {"thinker": THINKER_ARCH, "talker": TALKER_ARCH, "code2wav": TOKEN2WAV_ARCH}
STAGE_OUTPUTS = {"thinker": "text", "talker": "codec", "code2wav": "audio"}

PIPELINE_IDS = {"thinker_only": "qwen2_5_omni_thinker_only", "full": "qwen2_5_omni"}


def builtin_stage_configs(mode: str) -> tuple[StageConfig, ...]:
    """The topology of each mode (vLLM-Omni's pipelines, restated without importing it)."""
    if mode == "thinker_only":
        return (StageConfig(0, THINKER_ARCH, "text", final_output=True),)
    return (
        StageConfig(0, THINKER_ARCH, "text", final_output=True, return_hidden_states=True),
        StageConfig(1, TALKER_ARCH, "codec", inputs=(0,)),
        StageConfig(2, TOKEN2WAV_ARCH, "audio", final_output=True, inputs=(1,)),
    )


def vllm_omni_stage_configs(mode: str) -> tuple[StageConfig, ...]:
    """The topology translated from the vLLM-Omni pipeline each mode runs."""
    from vllm_omni.model_executor.models.qwen2_5_omni import pipeline as upstream

    source = upstream.QWEN2_5_OMNI_THINKER_ONLY_PIPELINE if mode == "thinker_only" else upstream.QWEN2_5_OMNI_PIPELINE
    stages = list(source.stages)
    consumed = {i for stage in stages for i in stage.input_sources}
    return tuple(
        StageConfig(
            stage_id=stage.stage_id,
            model_arch=STAGE_ARCHES[stage.model_stage],
            output_type=STAGE_OUTPUTS[stage.model_stage],  # type: ignore[arg-type]
            final_output=bool(stage.final_output),
            return_hidden_states=stage.model_stage == "thinker" and stage.stage_id in consumed,
            inputs=tuple(stage.input_sources),
        )
        for stage in stages
    )


def vllm_omni_installed() -> bool:
    return importlib.util.find_spec("vllm_omni") is not None


@RolloutAdapter.register(PIPELINE)
class Qwen25OmniRolloutAdapter(RolloutAdapter):
    """Qwen2.5-Omni's generation pipeline; the thinker (stage 0) is the trained policy."""

    modes = ("thinker_only", "full")

    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        self.check_mode(mode)
        return builtin_stage_configs(mode)

    def rollout_flags(self, mode: str) -> dict[int, dict[str, object]]:
        self.check_mode(mode)
        return {} if mode == "thinker_only" else {0: {"return_hidden_states": True}}

    def get_pipeline_id(self, mode: str) -> str:
        self.check_mode(mode)
        return PIPELINE_IDS[mode]

    def upstream_deploy_file(self, mode: str) -> str | None:
        """vLLM-Omni's production deploy of this model: its talker (and vocoder) sampling
        defaults; without them the talker would stop after vLLM's default 16 tokens."""
        self.check_mode(mode)
        return None if mode == "thinker_only" else "qwen2_5_omni.yaml"

    def get_engine_hf_overrides(self, mode: str) -> dict[str, Any]:
        self.check_mode(mode)
        # Thinker-only: no talker or token2wav weights are loaded, no audio is produced.
        return {"enable_audio_output": False} if mode == "thinker_only" else {}
