"""``thinker_talker``'s 2-stage pipeline in vLLM-Omni's real registry (gpu extra, CPU only).

Importing vllm_omni takes one to two minutes on CPU; the checks against the real
registry live in this one module.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from omni_contracts import RegistrationError
from omni_qwen3.rollout_adapter import Qwen3OmniRolloutAdapter
from omni_qwen3.vllm_pipeline import TALKER_PLACEHOLDERS, TALKER_RL_PIPELINE, THINKER_TALKER_PIPELINE, register_pipelines

pytest.importorskip("vllm_omni", reason="needs the gpu extra (uv sync --extra distributed --extra gpu)")

GOLDEN = (Path(__file__).resolve().parents[2]
          / "omni-rollout/tests/golden/qwen3_omni_moe_thinker_talker.json")


def test_thinker_talker_registers_a_two_stage_pipeline_without_code2wav() -> None:
    from vllm_omni.config.pipeline_registry import resolve_pipeline_config
    from vllm_omni.model_executor.models.qwen3_omni import pipeline as upstream

    adapter = Qwen3OmniRolloutAdapter()
    adapter.ensure_pipeline_registered()
    assert adapter.get_pipeline_id("thinker_talker") == THINKER_TALKER_PIPELINE
    pipeline = resolve_pipeline_config(THINKER_TALKER_PIPELINE)
    assert pipeline is not None and pipeline.validate() == []
    assert [stage.model_stage for stage in pipeline.stages] == ["thinker", "talker"]
    thinker, talker = pipeline.stages
    up_thinker, up_talker, _ = upstream.QWEN3_OMNI_PIPELINE.stages
    # The thinker is upstream's; the talker is upstream's made final, with no hand-off
    # to code2wav, and its placeholders sized for the checkpoint's role ids. Everything else
    # (constraints, the other input processors) is unchanged.
    assert thinker == up_thinker
    assert (talker.final_output, talker.final_output_type) == (True, "latent")
    assert talker.sync_process_input_func == TALKER_PLACEHOLDERS
    assert talker.custom_process_next_stage_input_func is None
    assert talker.async_chunk_process_next_stage_input_func is None
    assert dataclasses.replace(
        talker, final_output=up_talker.final_output,
        final_output_type=up_talker.final_output_type,
        custom_process_next_stage_input_func=up_talker.custom_process_next_stage_input_func,
        async_chunk_process_next_stage_input_func=(
            up_talker.async_chunk_process_next_stage_input_func),
        sync_process_input_func=up_talker.sync_process_input_func,
    ) == up_talker
    assert pipeline.model_arch == upstream.QWEN3_OMNI_PIPELINE.model_arch


def test_talker_rl_registers_three_stages_with_the_talker_final_too() -> None:
    from vllm_omni.config.pipeline_registry import resolve_pipeline_config
    from vllm_omni.model_executor.models.qwen3_omni import pipeline as upstream

    adapter = Qwen3OmniRolloutAdapter()
    adapter.ensure_pipeline_registered()
    assert adapter.get_pipeline_id("talker") == TALKER_RL_PIPELINE
    pipeline = resolve_pipeline_config(TALKER_RL_PIPELINE)
    assert pipeline is not None and pipeline.validate() == []
    thinker, talker, code2wav = pipeline.stages
    up_thinker, up_talker, up_code2wav = upstream.QWEN3_OMNI_PIPELINE.stages
    assert (thinker, code2wav) == (up_thinker, up_code2wav)
    # The talker is upstream's, hand-off to code2wav included, and reports to the client.
    assert (talker.final_output, talker.final_output_type) == (True, "latent")
    assert talker.sync_process_input_func == TALKER_PLACEHOLDERS
    assert dataclasses.replace(talker, final_output=up_talker.final_output,
                               final_output_type=up_talker.final_output_type,
                               sync_process_input_func=up_talker.sync_process_input_func) == up_talker


def test_registration_is_idempotent_and_never_clobbers(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_omni.config.pipeline_registry import OMNI_PIPELINES

    register_pipelines()
    first = OMNI_PIPELINES[THINKER_TALKER_PIPELINE]
    register_pipelines()
    assert OMNI_PIPELINES[THINKER_TALKER_PIPELINE] is first

    other = dataclasses.replace(first, stages=first.stages[:1])
    monkeypatch.setitem(OMNI_PIPELINES, THINKER_TALKER_PIPELINE, other)
    with pytest.raises(RegistrationError, match="will not overwrite it"):
        register_pipelines()
    assert OMNI_PIPELINES[THINKER_TALKER_PIPELINE] is other


def test_golden_thinker_talker_deploy_config_merges_into_two_stages() -> None:
    from vllm_omni.config.pipeline_registry import resolve_pipeline_config
    from vllm_omni.config.stage_config import load_deploy_config, merge_pipeline_deploy

    Qwen3OmniRolloutAdapter().ensure_pipeline_registered()
    deploy = load_deploy_config(GOLDEN)
    # What vLLM-Omni does with `pipeline:` in a deploy config (config_factory).
    pipeline = resolve_pipeline_config(deploy.pipeline)
    assert pipeline is not None
    merged = merge_pipeline_deploy(pipeline, deploy)
    assert len(merged) == 2  # code2wav is not started
    assert merged[0].yaml_engine_args["gpu_memory_utilization"] == 0.7
