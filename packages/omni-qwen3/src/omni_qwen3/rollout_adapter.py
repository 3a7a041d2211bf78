"""Rollout adapter for Qwen3-Omni, pipeline ``qwen3_omni_moe``.

Four modes on three vLLM-Omni pipelines: ``thinker_only`` (stage 0, text; what RL on
the thinker uses; ``qwen3_omni_moe_thinker_only``), ``thinker_talker`` (stages 0-1, codec
tokens out; the thinker hands hidden states to the talker; ``qwen3_omni_moe_thinker_talker``,
registered by this package, see ``omni_qwen3.vllm_pipeline``), ``full`` (stages 0-2, a
waveform out; ``qwen3_omni_moe``) and ``talker``: stages 0-2 with the talker (stage 1) as
the trained policy, the stage that takes the actor's weights, and a final stage besides the
thinker and code2wav (``qwen3_omni_moe_talker_rl``, registered by this package); its samples
are mapped to the talker's codec-0 sequence by :mod:`omni_qwen3.talker_outputs`; its policy stage masks the
talker's own codec control ids (never the thinker's placeholders: they lie outside the talker's
logits) and takes only the actor's ``talker.*`` weights. The topology, flags, pipeline ids,
deploy file and overrides are the model kit's
(:class:`omni_model_kit.rollout_adapter.OmniRolloutAdapter`), written without vLLM-Omni, so
the local engine never imports it (its import takes ~20 s and patches torch); a gpu-extra
test checks that the topology agrees with vLLM-Omni's pipeline definitions.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from omni_contracts import LogitMask, RolloutAdapter, RolloutSample, StageConfig, StageOutput
from omni_model_kit.rollout_adapter import (
    TALKER_MODE,
    OmniRolloutAdapter,
    keep_final_outputs,
    omni_stage_configs,
    translate_pipeline,
    vllm_omni_installed,
)

from omni_qwen3.vllm_positions import PLUGIN_NAME as SOUNDTRACK_POSITIONS_PLUGIN
from omni_qwen3.vllm_stage_inputs import ROLE_IDS_KEY, role_token_ids
from omni_qwen3.vllm_pipeline import (
    TALKER_RL_PIPELINE,
    THINKER_TALKER_PIPELINE,
    register_pipelines,
    talker_rl_pipeline,
    thinker_talker_pipeline,
)

PIPELINE = "qwen3_omni_moe"
STAGE_ARCHES = {
    "thinker": "Qwen3OmniMoeThinkerForConditionalGeneration",
    "talker": "Qwen3OmniMoeTalkerForConditionalGeneration",
    "code2wav": "Qwen3OmniMoeCode2Wav",
}

PIPELINE_IDS = {
    "thinker_only": "qwen3_omni_moe_thinker_only",
    "thinker_talker": THINKER_TALKER_PIPELINE,
    "full": "qwen3_omni_moe",
    "talker": TALKER_RL_PIPELINE,
}
TALKER_STAGE_ID = 1
TALKER_WEIGHT_PREFIX = "talker."
"""The checkpoint names of the talker stage's parameters (vLLM-Omni's stage model loads
``talker.*`` and warns on, or ignores, the rest)."""


def suppressed_codec_ids(config: Any) -> list[int]:
    """Codec-0 ids the talker must never emit: control tokens and ids past the codebook,
    all but the end-of-speech token (``config``: the checkpoint's ``Qwen3OmniMoeConfig``)."""
    talker = config.talker_config
    vocab = talker.text_config.vocab_size
    codebook = config.code2wav_config.codebook_size
    controls = {
        talker.codec_pad_id, talker.codec_bos_id, talker.codec_nothink_id,
        talker.codec_think_bos_id, talker.codec_think_eos_id,
    }
    return sorted((set(range(codebook, vocab)) | controls) - {talker.codec_eos_token_id})


builtin_stage_configs = partial(omni_stage_configs, STAGE_ARCHES)
"""The topology of each mode (vLLM-Omni's pipelines, restated without importing it)."""


def vllm_omni_stage_configs(mode: str) -> tuple[StageConfig, ...]:
    """The topology translated from the vLLM-Omni pipeline each mode runs."""
    from vllm_omni.model_executor.models.qwen3_omni import pipeline as upstream

    if mode == "thinker_only":
        source = upstream.QWEN3_OMNI_THINKER_ONLY_PIPELINE
    elif mode == "thinker_talker":
        source = thinker_talker_pipeline()
    elif mode == TALKER_MODE:
        source = talker_rl_pipeline()
    else:
        source = upstream.QWEN3_OMNI_PIPELINE
    return translate_pipeline(source, STAGE_ARCHES)


@RolloutAdapter.register(PIPELINE)
class Qwen3OmniRolloutAdapter(OmniRolloutAdapter):
    """Qwen3-Omni's generation pipeline; the thinker (stage 0) is the trained policy, except
    in mode ``talker``, where the talker (stage 1) is."""

    modes = ("thinker_only", "thinker_talker", "full", TALKER_MODE)
    # vLLM-Omni 0.28 lays a video with its soundtrack out token for token as transformers does;
    # its positions after a soundtrack that ends before the frames are transformers' through
    # our vLLM plugin (omni_qwen3.vllm_positions).
    interleaves_soundtracks = True
    vllm_plugins = (SOUNDTRACK_POSITIONS_PLUGIN,)
    stage_arches = STAGE_ARCHES
    pipeline_ids = PIPELINE_IDS
    deploy_file = "qwen3_omni_moe.yaml"

    def ensure_pipeline_registered(self) -> None:
        """Register the pipelines of ``thinker_talker`` and ``talker`` with vLLM-Omni when it
        is installed.

        The other two modes use pipelines vLLM-Omni registers itself; without vLLM-Omni
        (the local engine) there is nothing to register.
        """
        if vllm_omni_installed():
            register_pipelines()

    def policy_stage_id(self, mode: str) -> int:
        self.check_mode(mode)
        return TALKER_STAGE_ID if mode == TALKER_MODE else 0

    def weight_sync_prefixes(self, mode: str) -> tuple[str, ...] | None:
        """Mode ``talker``: the talker's parameters only (the actor also holds the frozen
        thinker and code2wav, whose weights the engine keeps); the other modes: all."""
        self.check_mode(mode)
        return (TALKER_WEIGHT_PREFIX,) if mode == TALKER_MODE else None

    def policy_logit_mask(self, mode: str, model_config: Any, text_mask: LogitMask) -> LogitMask:
        """The thinker's modes: ``text_mask`` (the tokenizer's vocabulary, the media
        placeholders). Mode ``talker``: the talker's codec vocabulary with the ids its actor
        suppresses too (:func:`suppressed_codec_ids`), so both sample one distribution."""
        self.check_mode(mode)
        if mode != TALKER_MODE:
            return text_mask
        return LogitMask(model_config.talker_config.text_config.vocab_size, tuple(suppressed_codec_ids(model_config)))

    def engine_prompt_information(self, mode: str, model_config: Any) -> dict[str, Any]:
        """The modes omni_qwen3's pipelines run (``thinker_talker``, ``talker``): the
        checkpoint's role ids, which size the talker's prompt (:mod:`omni_qwen3.vllm_stage_inputs`)."""
        self.check_mode(mode)
        if self.pipeline_ids[mode] not in (THINKER_TALKER_PIPELINE, TALKER_RL_PIPELINE):
            return {}
        return {ROLE_IDS_KEY: role_token_ids(model_config)}

    def combine_engine_outputs(self, outputs: Sequence[StageOutput], mode: str) -> tuple[StageOutput, ...]:
        """Mode ``talker`` keeps every final stage: the thinker text the talker spoke, the
        talker's codes and code2wav's waveform."""
        if mode == TALKER_MODE:
            return keep_final_outputs(outputs, self.build_stage_configs(mode))
        return super().combine_engine_outputs(outputs, mode)

    def postprocess_agent_loop_output(
        self, sample: RolloutSample, outputs: Sequence[StageOutput], mode: str
    ) -> RolloutSample:
        """Mode ``talker``: the talker's codec-0 tokens as the response, with the residual
        codebooks, the thinker sequence it spoke from and the waveform (see :func:`talker_sample`)."""
        if mode != TALKER_MODE:
            return sample
        from omni_qwen3.talker_outputs import talker_sample

        return talker_sample(sample, outputs, thinker_stage=0, talker_stage=TALKER_STAGE_ID, code2wav_stage=2)
