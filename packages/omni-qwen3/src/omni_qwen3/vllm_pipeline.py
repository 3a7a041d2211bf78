"""Qwen3-Omni's pipelines in vLLM-Omni's registry, including the 2-stage one it lacks.

vLLM-Omni 0.28 registers two Qwen3-Omni topologies (``vllm_omni/config/pipeline_registry``):
``qwen3_omni_moe_thinker_only`` (stage 0) and ``qwen3_omni_moe`` (a resolver returning the
3-stage thinker -> talker -> code2wav pipeline whenever the HF config enables audio output).
A deploy config naming ``qwen3_omni_moe`` therefore always starts code2wav, even if it lists
only two stages. ``thinker_talker`` mode (codec tokens out, no waveform) gets its own
pipeline instead, registered through vLLM-Omni's out-of-tree hook ``register_pipeline``.

The 2-stage pipeline is derived from the upstream 3-stage one, so the thinker and talker
keep upstream's stage settings (input processors, sampling constraints, hf_config_name);
only the talker changes: it becomes a final stage (output type ``"latent"``, the label
vLLM-Omni uses for non-text, non-media payloads) with no next-stage hand-off.

vLLM-Omni is imported inside the functions (gpu extra, ~60 s on CPU).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from omni_contracts import RegistrationError

if TYPE_CHECKING:
    from vllm_omni.config.stage_config import PipelineConfig

THINKER_TALKER_PIPELINE = "qwen3_omni_moe_thinker_talker"
"""Registry key of the 2-stage pipeline (also its ``model_type``)."""

TALKER_FINAL_OUTPUT_TYPE = "latent"


def thinker_talker_pipeline() -> PipelineConfig:
    """The thinker -> talker pipeline, built from upstream's frozen 3-stage definition.

    Raises:
        RegistrationError: the upstream pipeline no longer has a thinker at stage 0 fed
            to a talker at stage 1 (an upstream change this derivation must follow).
    """
    from vllm_omni.model_executor.models.qwen3_omni import pipeline as upstream

    source = upstream.QWEN3_OMNI_PIPELINE
    stages = {stage.stage_id: stage for stage in source.stages}
    thinker, talker = stages.get(0), stages.get(1)
    if (
        thinker is None
        or talker is None
        or thinker.model_stage != "thinker"
        or talker.model_stage != "talker"
        or tuple(talker.input_sources) != (0,)
    ):
        raise RegistrationError(
            f"vLLM-Omni's {source.model_type!r} pipeline no longer has thinker (stage 0) -> "
            f"talker (stage 1); got {[(s.stage_id, s.model_stage) for s in source.stages]}. "
            "Update omni_qwen3.vllm_pipeline for this vLLM-Omni version."
        )
    final_talker = dataclasses.replace(
        talker,
        final_output=True,
        final_output_type=TALKER_FINAL_OUTPUT_TYPE,
        custom_process_next_stage_input_func=None,
        async_chunk_process_next_stage_input_func=None,
    )
    return dataclasses.replace(
        source,
        model_type=THINKER_TALKER_PIPELINE,
        stages=(thinker, final_talker),
        # The bundled deploy YAML describes the 3-stage topology; the engine always
        # passes a generated deploy config for this one.
        default_deploy_config_name=None,
    )


def register_thinker_talker_pipeline() -> None:
    """Register the 2-stage pipeline with vLLM-Omni; idempotent.

    Raises:
        RegistrationError: another pipeline is already registered under the name, or
            vLLM-Omni reports topology errors for it.
    """
    from vllm_omni.config.pipeline_registry import OMNI_PIPELINES, register_pipeline

    pipeline = thinker_talker_pipeline()
    existing = OMNI_PIPELINES.get(THINKER_TALKER_PIPELINE)
    if existing is not None:
        if existing == pipeline:
            return
        raise RegistrationError(
            f"vLLM-Omni already has a different pipeline registered as "
            f"{THINKER_TALKER_PIPELINE!r}; omni_qwen3 will not overwrite it. Remove the "
            "other registration or pick another pipeline name."
        )
    errors = pipeline.validate()
    if errors:
        raise RegistrationError(
            f"The {THINKER_TALKER_PIPELINE!r} pipeline is invalid for vLLM-Omni: {errors}."
        )
    register_pipeline(pipeline)
