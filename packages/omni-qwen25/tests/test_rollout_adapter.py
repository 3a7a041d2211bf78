from __future__ import annotations

import pytest

from omni_contracts import RolloutSample, StageOutput, UnknownModeError, get_rollout_adapter, testing
from omni_model_kit.rollout_adapter import vllm_omni_installed
from omni_qwen25.rollout_adapter import PIPELINE, Qwen25OmniRolloutAdapter, builtin_stage_configs
from omni_qwen25.training_adapter import Qwen25OmniThinkerAdapter

MODES = ("thinker_only", "full")


def test_registered_under_the_pipeline_name() -> None:
    testing.check_rollout_registration(Qwen25OmniRolloutAdapter, PIPELINE)
    assert isinstance(get_rollout_adapter(PIPELINE), Qwen25OmniRolloutAdapter)


def test_contract_kit_passes() -> None:
    adapter = Qwen25OmniRolloutAdapter()
    testing.check_rollout_modes(adapter)
    testing.check_combine_engine_outputs(adapter)
    sample = RolloutSample((1, 2), (3, 4, 5), (1, 1, 1), (-0.1, -0.2, -0.3))
    kept = testing.check_postprocess_alignment(
        adapter, sample, [StageOutput(0, (3, 4, 5))], "thinker_only", Qwen25OmniThinkerAdapter.extra_field_specs
    )
    assert kept == sample


def test_modes_pipelines_and_overrides() -> None:
    adapter = Qwen25OmniRolloutAdapter()
    (thinker,) = builtin_stage_configs("thinker_only")
    assert (thinker.model_arch, thinker.output_type, thinker.final_output) == (
        "Qwen2_5OmniThinkerForConditionalGeneration", "text", True,
    )
    assert [s.output_type for s in builtin_stage_configs("full")] == ["text", "codec", "audio"]
    assert adapter.get_pipeline_id("thinker_only") == "qwen2_5_omni_thinker_only"
    assert adapter.get_pipeline_id("full") == "qwen2_5_omni"
    assert adapter.rollout_flags("thinker_only") == {}
    assert adapter.rollout_flags("full") == {0: {"return_hidden_states": True}}
    assert adapter.get_engine_hf_overrides("thinker_only") == {"enable_audio_output": False}
    for mode in MODES:
        assert adapter.policy_stage_id(mode) == 0 and adapter.weight_sync_stage_ids(mode) == (0,)
    with pytest.raises(UnknownModeError, match=r"'thinker_talker'; valid modes: thinker_only, full"):
        adapter.get_pipeline_id("thinker_talker")


@pytest.mark.skipif(not vllm_omni_installed(), reason="needs the gpu extra (uv sync --extra distributed --extra gpu)")
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_builtin_topology_agrees_with_vllm_omni(mode: str) -> None:
    from omni_qwen25.rollout_adapter import vllm_omni_stage_configs

    assert vllm_omni_stage_configs(mode) == builtin_stage_configs(mode)
