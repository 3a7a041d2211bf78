from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from omni_contracts import (
    LogitMask,
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
    suppressed_codec_ids,
    vllm_omni_installed,
)
from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter

MODES = ("thinker_only", "thinker_talker", "full")
"""The modes that train the thinker."""

REAL_CONFIG = SimpleNamespace(
    talker_config=SimpleNamespace(
        text_config=SimpleNamespace(vocab_size=3072), codec_pad_id=2148, codec_bos_id=2149, codec_eos_token_id=2150,
        codec_nothink_id=2155, codec_think_bos_id=2156, codec_think_eos_id=2157,
    ),
    code2wav_config=SimpleNamespace(codebook_size=2048),
)
"""What the talker's mask reads from Qwen3-Omni-30B-A3B's config.json."""
REAL_PLACEHOLDERS = (151652, 151653, 151655, 151656, 151669, 151670, 151675)
"""The real tokenizer's vision/audio delimiters and image, video and audio pads."""


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


def test_each_policy_stage_masks_its_own_vocabulary(tiny_config: Any) -> None:
    """The thinker's modes keep the text mask (tokenizer length, media placeholders). The talker's
    logits are its codec vocabulary: the thinker's placeholders (>= 151643) lie past them, and
    what it bans is what its actor suppresses."""
    adapter = Qwen3OmniRolloutAdapter()
    text = LogitMask(151676, REAL_PLACEHOLDERS)
    for mode in MODES:
        assert adapter.policy_logit_mask(mode, REAL_CONFIG, text) is text
    talker = adapter.policy_logit_mask("talker", REAL_CONFIG, text)
    # Ids 2048..3071 past the codebook (the controls 2148..2157 among them) but the end of
    # speech 2150: the set vLLM-Omni's talker suppresses itself ([vocab - 1024, vocab) - {eos}).
    assert talker.vocab_size == 3072
    assert set(talker.banned_token_ids) == set(range(2048, 3072)) - {2150}

    vocab = tiny_config.talker_config.text_config.vocab_size  # 64: placeholders of the tiny tokenizer fall inside
    tiny = adapter.policy_logit_mask("talker", tiny_config, LogitMask(4096, (3, 10, 40)))
    assert tiny.vocab_size == vocab
    assert set(tiny.banned_token_ids) == set(suppressed_codec_ids(tiny_config)) and not {3, 10, 40} & set(tiny.banned_token_ids)


def test_only_the_talker_mode_cuts_the_weight_sync_to_its_stage() -> None:
    adapter = Qwen3OmniRolloutAdapter()
    assert adapter.weight_sync_prefixes("talker") == ("talker.",)  # not the frozen thinker or code2wav
    assert all(adapter.weight_sync_prefixes(mode) is None for mode in MODES)


def test_unknown_mode_lists_the_valid_ones() -> None:
    adapter = Qwen3OmniRolloutAdapter()
    for hook in (adapter.build_stage_configs, adapter.rollout_flags, adapter.get_pipeline_id,
                 adapter.get_engine_hf_overrides, adapter.weight_sync_prefixes):
        with pytest.raises(UnknownModeError, match=r"'talker_only'; valid modes: thinker_only, thinker_talker, full"):
            hook("talker_only")


@pytest.mark.skipif(not vllm_omni_installed(), reason="needs the gpu extra (vllm-omni)")
@pytest.mark.parametrize("mode", (*MODES, "talker"))
def test_builtin_topology_agrees_with_vllm_omni(mode: str) -> None:
    from omni_qwen3.rollout_adapter import vllm_omni_stage_configs

    assert vllm_omni_stage_configs(mode) == builtin_stage_configs(mode)
