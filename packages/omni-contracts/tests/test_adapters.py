from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from omni_contracts import (
    ExtraFieldError,
    LogitMask,
    RolloutAdapter,
    RolloutSample,
    SchemaError,
    StageConfig,
    StageOutput,
    UnknownModeError,
    check_engine_prompt,
    get_rollout_adapter,
    get_training_adapter,
    strip_submodules,
)
from omni_contracts.errors import RegistrationError


class TextOnly(RolloutAdapter):
    modes = ("text",)

    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        self.check_mode(mode)
        return [StageConfig(0, "A", "text", final_output=True)]

    def rollout_flags(self, mode: str) -> dict[int, dict[str, object]]:
        self.check_mode(mode)
        return {}

    def get_pipeline_id(self, mode: str) -> str:
        self.check_mode(mode)
        return "text"


def test_registered_adapters_resolve_to_fresh_instances(fake: ModuleType) -> None:
    adapter = get_training_adapter(fake.FAKE_ARCH, "thinker")
    assert type(adapter) is fake.FakeThinkerAdapter
    assert get_training_adapter(fake.FAKE_ARCH, "thinker") is not adapter
    assert type(get_rollout_adapter(fake.FAKE_PIPELINE)) is fake.FakeRolloutAdapter


def test_rollout_adapter_without_modes_is_refused() -> None:
    class NoModes(TextOnly):
        modes = ()

    with pytest.raises(RegistrationError, match="NoModes declares no pipeline modes"):
        RolloutAdapter.register("no_modes")(NoModes)


def test_unknown_mode_lists_valid_modes(fake: ModuleType) -> None:
    with pytest.raises(UnknownModeError, match="no pipeline mode 'full'; valid modes: thinker_only, thinker_talker"):
        fake.FakeRolloutAdapter().build_stage_configs("full")


def test_defaults_describe_a_single_output_model() -> None:
    adapter = TextOnly()
    assert adapter.policy_stage_id("text") == 0
    assert adapter.weight_sync_stage_ids("text") == (0,)
    assert adapter.get_engine_hf_overrides("text") == {}
    assert adapter.get_stage_engine_extras(0, "text") == {}
    assert adapter.prepare_engine_prompt([1, 2], None, None) is None
    first, last = StageOutput(0, (1,)), StageOutput(0, (2,))
    assert adapter.combine_engine_outputs([first, last], "text") == (last,)
    assert adapter.combine_engine_outputs([], "text") == ()
    made = RolloutSample((1,), (2,), (1,))
    assert adapter.postprocess_agent_loop_output(made, [last], "text") is made


class SpeechPolicy(TextOnly):
    """Text -> codec, the codec stage trained: a policy stage that samples another vocabulary."""

    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        self.check_mode(mode)
        return [StageConfig(0, "A", "text", final_output=True), StageConfig(1, "B", "codec", True, inputs=(0,))]

    def policy_stage_id(self, mode: str) -> int:
        return 1


def test_a_text_policy_keeps_the_text_mask_and_another_vocabulary_must_bring_its_own() -> None:
    text = LogitMask(100, (97, 98))
    assert TextOnly().policy_logit_mask("text", None, text) is text
    assert TextOnly().weight_sync_prefixes("text") is None  # every parameter the actor holds
    # The text mask's ids belong to the tokenizer; applied to a codec stage they would ban codec
    # ids (or lie past its logits): an adapter whose policy is not text must say what it bans.
    with pytest.raises(NotImplementedError, match=r"stage 1\) emits 'codec', not text.*Override policy_logit_mask"):
        SpeechPolicy().policy_logit_mask("text", None, text)


def test_a_logit_mask_refuses_ids_outside_its_stage() -> None:
    assert LogitMask(3072, (2150, 2048, 2048)).banned_token_ids == (2048, 2150)  # sorted, once each
    # 151655 (a thinker's image placeholder) is past a talker's 3072 logits: verl's index_fill_
    # would fail on the device with it.
    with pytest.raises(SchemaError, match=r"Banned ids \[151655\] lie outside the policy stage's 3072 logits"):
        LogitMask(3072, (2048, 151655))
    with pytest.raises(SchemaError, match="needs the stage's vocabulary size"):
        LogitMask(0)


def test_custom_prompt_must_carry_mm_processor_kwargs() -> None:
    kwargs = {"use_audio_in_video": True}
    check_engine_prompt({"prompt_token_ids": [1]}, None)
    check_engine_prompt({"prompt_token_ids": [1], "mm_processor_kwargs": dict(kwargs)}, kwargs)
    with pytest.raises(SchemaError, match="has no 'mm_processor_kwargs' but the request has"):
        check_engine_prompt({"prompt_token_ids": [1]}, kwargs)
    with pytest.raises(SchemaError, match=r"differ from the request's on \['use_audio_in_video'\]"):
        check_engine_prompt({"mm_processor_kwargs": {"use_audio_in_video": False}}, kwargs)


def test_strip_submodules_removes_nested_paths_deepest_first(fake_model: Any) -> None:
    before = sum(p.numel() for p in fake_model.parameters())
    talker = sum(p.numel() for p in fake_model.talker.parameters())
    removed = strip_submodules(fake_model, ["talker", "talker.code_predictor"])
    assert removed == ["talker.code_predictor", "talker"]
    assert not hasattr(fake_model, "talker")
    assert sum(p.numel() for p in fake_model.parameters()) == before - talker


def test_strip_submodules_names_the_children_on_a_bad_path(fake_model: Any) -> None:
    with pytest.raises(SchemaError, match=r"Cannot strip 'vocoder'.*children there: thinker, talker, code2wav"):
        strip_submodules(fake_model, ["vocoder"])
    with pytest.raises(SchemaError, match=r"Cannot strip 'talker.decoder'.*children there: code_predictor, head"):
        strip_submodules(fake_model, ["talker.decoder"])


def test_default_prepare_model_inputs_validates_and_forwards(fake: ModuleType) -> None:
    adapter = fake.FakeThinkerAdapter()
    config = SimpleNamespace()
    inputs = {"input_ids": "ids"}
    batch = {fake.CODEC_KEY: [[[1, 2]] * 3, [[3, 4]] * 2]}
    assert adapter.prepare_model_inputs(inputs, batch, config) == {
        "input_ids": "ids",
        "codec_ids": batch[fake.CODEC_KEY],
    }
    with pytest.raises(ExtraFieldError, match=r"none of the required extra fields \(fake_omni.codec_ids\)"):
        adapter.prepare_model_inputs(inputs, {}, config)
    bad = {fake.CODEC_KEY: [[[1, 2, 3]]]}
    with pytest.raises(ExtraFieldError, match=r"micro-batch row 0: extra field 'fake_omni.codec_ids' has shape \(1, 3\)"):
        adapter.prepare_model_inputs(inputs, bad, config)
