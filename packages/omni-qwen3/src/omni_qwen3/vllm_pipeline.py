"""Qwen3-Omni's pipelines in vLLM-Omni's registry, including the two it lacks.

vLLM-Omni 0.28 registers two Qwen3-Omni topologies (``vllm_omni/config/pipeline_registry``):
``qwen3_omni_moe_thinker_only`` (stage 0) and ``qwen3_omni_moe`` (a resolver returning the
3-stage thinker -> talker -> code2wav pipeline whenever the HF config enables audio output).
A deploy config naming ``qwen3_omni_moe`` therefore always starts code2wav, even if it lists
only two stages. ``thinker_talker`` mode (codec tokens out, no waveform) gets its own
pipeline instead, registered through vLLM-Omni's out-of-tree hook ``register_pipeline``.

The 2-stage pipeline is derived from the upstream 3-stage one, so the thinker and talker
keep upstream's stage settings (input processors, sampling constraints, hf_config_name);
only the talker changes: its prompt placeholders are sized for the checkpoint's role ids
(:mod:`omni_qwen3.vllm_stage_inputs`), and it becomes a final stage (output type ``"latent"``, the label
vLLM-Omni uses for non-text, non-media payloads) with no next-stage hand-off. Rollout mode
``talker`` (the talker trained) gets a third, ``qwen3_omni_moe_talker_rl``: all three stages,
the talker final too, so its codes and log-probs reach the client along with the waveform.

vLLM-Omni is imported inside the functions (gpu extra, ~60 s on CPU).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from omni_contracts import RegistrationError

if TYPE_CHECKING:
    from vllm_omni.config.stage_config import PipelineConfig

THINKER_TALKER_PIPELINE = "qwen3_omni_moe_thinker_talker"
"""Registry key of the 2-stage pipeline (also its ``model_type``)."""

TALKER_RL_PIPELINE = "qwen3_omni_moe_talker_rl"
"""Registry key of the 3-stage pipeline whose talker is also a final stage (rollout mode
``talker``: the talker's codes and log-probs reach the client, and so does code2wav's waveform)."""

TALKER_FINAL_OUTPUT_TYPE = "latent"

TALKER_PLACEHOLDERS = "omni_qwen3.vllm_stage_inputs.thinker2talker_token_only"
"""The talker's ``sync_process_input_func`` in both pipelines: upstream's, sized for the
checkpoint's role ids (see :mod:`omni_qwen3.vllm_stage_inputs`)."""


def _upstream_stages() -> tuple[PipelineConfig, Any, Any, Any]:
    """vLLM-Omni's 3-stage pipeline and its thinker, talker and code2wav stages.

    Raises:
        RegistrationError: the upstream pipeline no longer has a thinker at stage 0 fed
            to a talker at stage 1 fed to code2wav at stage 2 (an upstream change these
            derivations must follow).
    """
    from vllm_omni.model_executor.models.qwen3_omni import pipeline as upstream

    source = upstream.QWEN3_OMNI_PIPELINE
    stages = {stage.stage_id: stage for stage in source.stages}
    thinker, talker, code2wav = stages.get(0), stages.get(1), stages.get(2)
    if (
        thinker is None
        or talker is None
        or code2wav is None
        or thinker.model_stage != "thinker"
        or talker.model_stage != "talker"
        or tuple(talker.input_sources) != (0,)
        or tuple(code2wav.input_sources) != (1,)
        or not str(talker.sync_process_input_func).endswith(".qwen3_omni.thinker2talker_token_only")
    ):
        raise RegistrationError(
            f"vLLM-Omni's {source.model_type!r} pipeline no longer has thinker (stage 0) -> "
            f"talker (stage 1, placeholders from thinker2talker_token_only) -> code2wav (stage 2); got "
            f"{[(s.stage_id, s.model_stage, s.sync_process_input_func) for s in source.stages]}. "
            "Update omni_qwen3.vllm_pipeline for this vLLM-Omni version."
        )
    return source, thinker, talker, code2wav


def thinker_talker_pipeline() -> PipelineConfig:
    """The thinker -> talker pipeline, built from upstream's frozen 3-stage definition.

    Raises:
        RegistrationError: see :func:`_upstream_stages`.
    """
    source, thinker, talker, _ = _upstream_stages()
    final_talker = dataclasses.replace(
        talker,
        final_output=True,
        final_output_type=TALKER_FINAL_OUTPUT_TYPE,
        sync_process_input_func=TALKER_PLACEHOLDERS,
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


def talker_rl_pipeline() -> PipelineConfig:
    """Upstream's thinker -> talker -> code2wav pipeline with the talker made a final stage
    too (its hand-off to code2wav kept), so a request returns the thinker's text, the
    talker's codes and log-probs, and the waveform.

    Raises:
        RegistrationError: see :func:`_upstream_stages`.
    """
    source, thinker, talker, code2wav = _upstream_stages()
    final_talker = dataclasses.replace(
        talker, final_output=True, final_output_type=TALKER_FINAL_OUTPUT_TYPE, sync_process_input_func=TALKER_PLACEHOLDERS
    )
    return dataclasses.replace(
        source, model_type=TALKER_RL_PIPELINE, stages=(thinker, final_talker, code2wav),
        default_deploy_config_name=None,
    )


def register_pipelines() -> None:
    """Register both derived pipelines with vLLM-Omni; idempotent.

    Raises:
        RegistrationError: another pipeline is already registered under one of the names,
            or vLLM-Omni reports topology errors for one.
    """
    from vllm_omni.config.pipeline_registry import OMNI_PIPELINES, register_pipeline

    for name, pipeline in ((THINKER_TALKER_PIPELINE, thinker_talker_pipeline()),
                           (TALKER_RL_PIPELINE, talker_rl_pipeline())):
        existing = OMNI_PIPELINES.get(name)
        if existing is not None:
            if existing == pipeline:
                continue
            raise RegistrationError(
                f"vLLM-Omni already has a different pipeline registered as {name!r}; omni_qwen3 will "
                "not overwrite it. Remove the other registration or pick another pipeline name."
            )
        errors = pipeline.validate()
        if errors:
            raise RegistrationError(f"The {name!r} pipeline is invalid for vLLM-Omni: {errors}.")
        register_pipeline(pipeline)
