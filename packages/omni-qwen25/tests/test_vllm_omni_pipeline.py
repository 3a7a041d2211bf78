"""The golden deploy configs read by vLLM-Omni 0.28's own loader and merged with its
registered Qwen2.5-Omni pipelines (gpu extra; no CUDA needed).

Importing vllm_omni takes a minute or more on CPU, hence the slow marker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_contracts import get_rollout_adapter

pytestmark = pytest.mark.slow
GOLDEN_DIR = Path(__file__).resolve().parents[2] / "omni-rollout/tests/golden"


@pytest.mark.parametrize("mode", ["thinker_only", "full"])
def test_golden_deploy_config_loads_and_merges(mode: str) -> None:
    pytest.importorskip("vllm_omni", reason="needs the gpu extra (uv sync --extra distributed --extra gpu)")
    from vllm_omni.config.pipeline_registry import resolve_pipeline_config
    from vllm_omni.config.stage_config import load_deploy_config, merge_pipeline_deploy

    adapter = get_rollout_adapter("qwen2_5_omni")
    adapter.ensure_pipeline_registered()
    deploy = load_deploy_config(GOLDEN_DIR / f"qwen2_5_omni_{mode}.json")
    assert deploy.pipeline == adapter.get_pipeline_id(mode) and deploy.async_chunk is False
    policy = deploy.stages[0]
    assert (policy.devices, policy.tensor_parallel_size) == ("2", 1)
    assert (policy.gpu_memory_utilization, policy.max_num_seqs) == (0.7, 256)
    assert policy.engine_extras["enable_sleep_mode"] is True
    pipeline = resolve_pipeline_config(deploy.pipeline)  # what vLLM-Omni does with `pipeline:`
    assert pipeline is not None and pipeline.validate() == []
    assert [s.stage_id for s in pipeline.stages] == [s.stage_id for s in adapter.build_stage_configs(mode)]
    merged = merge_pipeline_deploy(pipeline, deploy)
    assert len(merged) == len(deploy.stages)
    assert merged[0].yaml_engine_args["gpu_memory_utilization"] == 0.7
    assert merged[0].yaml_engine_args["compilation_config"] == {
        "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64, 128, 256]
    }
    if mode == "thinker_only":
        assert policy.engine_extras["hf_overrides"] == {"enable_audio_output": False}
    else:
        assert [s.devices for s in deploy.stages[1:]] == ["3", "3"]
