from __future__ import annotations

import pytest

from omni_contracts import (
    RolloutSample,
    StageOutput,
    UnknownModeError,
    get_rollout_adapter,
    testing,
    validate_stage_topology,
)
from omni_qwen3.rollout_adapter import (
    PIPELINE,
    Qwen3OmniRolloutAdapter,
    builtin_stage_configs,
    vllm_omni_installed,
)
from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter

MODES = ("thinker_only", "thinker_talker", "full")
"""The modes that train the thinker."""


def test_registered_under_the_pipeline_name() -> None:
    testing.check_rollout_registration(Qwen3OmniRolloutAdapter, PIPELINE)
    assert isinstance(get_rollout_adapter(PIPELINE), Qwen3OmniRolloutAdapter)


def test_contract_kit_passes() -> None:
    adapter = Qwen3OmniRolloutAdapter()
    testing.check_rollout_modes(adapter)
    testing.check_combine_engine_outputs(adapter)
    sample = RolloutSample((1, 2), (3, 4, 5), (1, 1, 1), (-0.1, -0.2, -0.3))
    kept = testing.check_postprocess_alignment(
        adapter, sample, [StageOutput(0, (3, 4, 5))], "thinker_only",
        Qwen3OmniThinkerAdapter.extra_field_specs,
    )
    assert kept == sample


@pytest.mark.parametrize(
    ("mode", "outputs", "final", "hidden"),
    [
        ("thinker_only", ["text"], [0], []),
        ("thinker_talker", ["text", "codec"], [0, 1], [0]),
        ("full", ["text", "codec", "audio"], [0, 2], [0]),
        ("talker", ["text", "codec", "audio"], [0, 1, 2], [0]),
    ],
)
def test_builtin_topology(mode: str, outputs: list[str], final: list[int], hidden: list[int]) -> None:
    stages = validate_stage_topology(builtin_stage_configs(mode))
    assert [s.output_type for s in stages] == outputs
    assert [s.stage_id for s in stages if s.final_output] == final
    assert [s.stage_id for s in stages if s.return_hidden_states] == hidden
    assert [s.inputs for s in stages] == [()] + [(i,) for i in range(len(stages) - 1)]
    assert stages[0].model_arch == "Qwen3OmniMoeThinkerForConditionalGeneration"


def test_thinker_only_is_text_out_with_audio_output_disabled() -> None:
    adapter = Qwen3OmniRolloutAdapter()
    assert adapter.rollout_flags("thinker_only") == {}
    assert adapter.get_engine_hf_overrides("thinker_only") == {"enable_audio_output": False}
    assert adapter.get_pipeline_id("thinker_only") == "qwen3_omni_moe_thinker_only"
    assert adapter.get_pipeline_id("full") == "qwen3_omni_moe"
    # Its own 2-stage pipeline, so vLLM-Omni does not start code2wav.
    assert adapter.get_pipeline_id("thinker_talker") == "qwen3_omni_moe_thinker_talker"
    assert adapter.rollout_flags("full") == {0: {"return_hidden_states": True}}
    for mode in MODES:
        assert adapter.policy_stage_id(mode) == 0
        assert adapter.weight_sync_stage_ids(mode) == (0,)


def test_talker_mode_trains_the_talker_of_the_three_stage_pipeline() -> None:
    adapter = Qwen3OmniRolloutAdapter()
    assert adapter.get_pipeline_id("talker") == "qwen3_omni_moe_talker_rl"
    assert adapter.rollout_flags("talker") == {0: {"return_hidden_states": True}}
    assert adapter.policy_stage_id("talker") == 1
    assert adapter.weight_sync_stage_ids("talker") == (1,)
    thinker, talker, vocoder = StageOutput(0, (7, 8)), StageOutput(1, (3, 4)), StageOutput(2)
    # Every final stage is kept: the text the talker spoke, its codes, the waveform.
    assert adapter.combine_engine_outputs([talker, vocoder, thinker], "talker") == (thinker, talker, vocoder)
    assert adapter.combine_engine_outputs([thinker, talker], "thinker_talker") == (talker,)


def test_unknown_mode_lists_the_valid_ones() -> None:
    adapter = Qwen3OmniRolloutAdapter()
    for hook in (adapter.build_stage_configs, adapter.rollout_flags, adapter.get_pipeline_id,
                 adapter.get_engine_hf_overrides):
        with pytest.raises(UnknownModeError, match=r"'talker_only'; valid modes: thinker_only, thinker_talker, full"):
            hook("talker_only")


@pytest.mark.skipif(not vllm_omni_installed(), reason="needs the gpu extra (vllm-omni)")
@pytest.mark.parametrize("mode", (*MODES, "talker"))
def test_builtin_topology_agrees_with_vllm_omni(mode: str) -> None:
    from omni_qwen3.rollout_adapter import vllm_omni_stage_configs

    assert vllm_omni_stage_configs(mode) == builtin_stage_configs(mode)
