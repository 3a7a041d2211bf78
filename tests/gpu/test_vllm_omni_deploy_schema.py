"""vLLM-Omni's own loader reads the generated deploy configs (gpu extra; no CUDA needed).

The golden files of tests/test_vllm_omni_deploy_qwen3.py are parsed by
``load_deploy_config`` and merged with the registered Qwen3-Omni pipelines, so a schema
change upstream fails here instead of at engine start. Importing vllm_omni takes about a
minute on CPU, hence the gpu marker: it runs in tests/gpu/run_gpu_smoke.sh.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
GOLDEN_DIR = Path(__file__).resolve().parents[2] / "packages/omni-rollout/tests/golden"


@pytest.mark.parametrize("mode", ["thinker_only", "thinker_talker", "full"])
def test_golden_deploy_config_loads_and_merges(mode: str) -> None:
    pytest.importorskip("vllm_omni")
    from vllm_omni.config.pipeline_registry import resolve_pipeline_config
    from vllm_omni.config.stage_config import load_deploy_config, merge_pipeline_deploy
    from vllm_omni.model_executor.models.qwen3_omni import pipeline as qwen3_pipelines

    from omni_contracts import get_rollout_adapter

    deploy = load_deploy_config(GOLDEN_DIR / f"qwen3_omni_moe_{mode}.json")
    assert deploy.async_chunk is False
    policy = deploy.stages[0]
    assert (policy.devices, policy.tensor_parallel_size) == ("2", 1)
    assert (policy.gpu_memory_utilization, policy.max_num_seqs) == (0.7, 256)
    assert policy.engine_extras["enable_sleep_mode"] is True

    if mode == "thinker_only":
        pipeline = resolve_pipeline_config(deploy.pipeline)
        assert policy.engine_extras["hf_overrides"] == {"enable_audio_output": False}
    elif mode == "thinker_talker":
        # omni_qwen3 registers this 2-stage pipeline; resolve it as vLLM-Omni will.
        get_rollout_adapter("qwen3_omni_moe").ensure_pipeline_registered()
        pipeline = resolve_pipeline_config(deploy.pipeline)
        assert [s.devices for s in deploy.stages[1:]] == ["3"]
    else:
        # "qwen3_omni_moe" resolves from the HF config; take its full variant directly.
        pipeline = qwen3_pipelines.QWEN3_OMNI_PIPELINE
        assert [s.devices for s in deploy.stages[1:]] == ["3"] * (len(deploy.stages) - 1)
    assert pipeline is not None
    merged = merge_pipeline_deploy(pipeline, deploy)
    assert len(merged) == len(deploy.stages)
    if mode != "thinker_only":
        # The talker samples with the production defaults (not vLLM's 16 tokens), and the
        # pipeline's own constraints (its stop token) stay.
        talker = merged[1].yaml_extras["default_sampling_params"]
        assert talker["max_tokens"] == 4096 and talker["stop_token_ids"] == [2150]
        # Every stage sleeps, and the stages sharing device 3 split the rollout's 0.7.
        assert all(stage.yaml_engine_args["enable_sleep_mode"] is True for stage in merged)
        assert sum(stage.yaml_engine_args["gpu_memory_utilization"] for stage in merged[1:]) <= 0.7
        assert all(stage.yaml_engine_args["enable_prefix_caching"] is False for stage in merged)
    assert merged[0].yaml_engine_args["gpu_memory_utilization"] == 0.7
    # Where the mode has vLLM-Omni's deploy file, its CUDA custom op for the thinker's MRoPE stays.
    custom_ops = {} if mode == "thinker_only" else {"custom_ops": ["+rotary_embedding"]}
    assert merged[0].yaml_engine_args["compilation_config"] == {
        **custom_ops, "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64, 128, 256]
    }
