"""Rollout adapter for Qwen2.5-Omni, pipeline ``qwen2_5_omni``.

Two modes, each a pipeline vLLM-Omni 0.28 registers itself
(``vllm_omni/model_executor/models/qwen2_5_omni/pipeline.py``): ``thinker_only`` (stage 0,
text; what RL on the thinker uses; ``qwen2_5_omni_thinker_only``) and ``full`` (thinker ->
talker -> token2wav, a waveform out; ``qwen2_5_omni``). The topology is the model kit's
(:func:`omni_model_kit.rollout_adapter.omni_stage_configs`), so the local engine never
imports vLLM-Omni; a gpu-extra test checks that it agrees with vLLM-Omni's pipelines.
"""

from __future__ import annotations

from functools import partial

from omni_contracts import RolloutAdapter, StageConfig
from omni_model_kit.rollout_adapter import OmniRolloutAdapter, omni_stage_configs, translate_pipeline
from omni_qwen25.vllm_soundtrack import PLUGIN_NAME as SOUNDTRACK_PLUGIN

PIPELINE = "qwen2_5_omni"
STAGE_ARCHES = {
    "thinker": "Qwen2_5OmniThinkerForConditionalGeneration",
    "talker": "Qwen2_5OmniTalkerForConditionalGeneration",
    "code2wav": "Qwen2_5OmniToken2WavModel",
}

builtin_stage_configs = partial(omni_stage_configs, STAGE_ARCHES)
"""The topology of each mode (vLLM-Omni's pipelines, restated without importing it)."""


def vllm_omni_stage_configs(mode: str) -> tuple[StageConfig, ...]:
    """The topology translated from the vLLM-Omni pipeline each mode runs."""
    from vllm_omni.model_executor.models.qwen2_5_omni import pipeline as upstream

    source = upstream.QWEN2_5_OMNI_THINKER_ONLY_PIPELINE if mode == "thinker_only" else upstream.QWEN2_5_OMNI_PIPELINE
    return translate_pipeline(source, STAGE_ARCHES)


@RolloutAdapter.register(PIPELINE)
class Qwen25OmniRolloutAdapter(OmniRolloutAdapter):
    """Qwen2.5-Omni's generation pipeline; the thinker (stage 0) is the trained policy."""

    modes = ("thinker_only", "full")
    # vLLM-Omni 0.28 counts a soundtrack block's audio start and end tokens as video placeholders
    # and stops on such a request; omni_qwen25.vllm_soundtrack masks the video tokens only.
    interleaves_soundtracks = True
    vllm_plugins = (SOUNDTRACK_PLUGIN,)
    stage_arches = STAGE_ARCHES
    pipeline_ids = {"thinker_only": "qwen2_5_omni_thinker_only", "full": "qwen2_5_omni"}
    deploy_file = "qwen2_5_omni.yaml"
