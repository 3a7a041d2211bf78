"""The contract kit, run against the fake model package: the good adapters pass, and each
way of breaking the contract fails with a message that says what to fix."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from omni_contracts import ContractViolation, RolloutSample, StageConfig, StageOutput, testing
from omni_contracts.errors import UnknownModeError


def codec_sample(fake: ModuleType, n: int = 2, **extra: object) -> RolloutSample:
    fields = {fake.CODEC_KEY: [[0, 0]] * n, **extra}
    return RolloutSample((7, 8), tuple(range(n)), (1,) * n, (-1.0,) * n, fields)


# --- the good pair --------------------------------------------------------------------------


def test_good_pair_passes_every_check(fake: ModuleType, fake_model: Any, fake_config: Any) -> None:
    training = fake.FakeThinkerAdapter()
    rollout = fake.FakeRolloutAdapter()
    testing.check_training_registration(fake.FakeThinkerAdapter, fake.FAKE_ARCH, "thinker")
    testing.check_rollout_registration(fake.FakeRolloutAdapter, fake.FAKE_PIPELINE)
    testing.check_strip_modules(training, fake_model, fake_config)
    testing.check_no_split_modules(fake_model)
    testing.check_no_rebound_methods(fake_model)
    testing.check_chat_templates(training, "/unused", fake_config)
    testing.check_processor(training, "/unused", fake_config)
    testing.check_rollout_modes(rollout)
    testing.check_combine_engine_outputs(rollout)
    testing.check_postprocess_alignment(
        rollout, codec_sample(fake), [StageOutput(0, (0, 1))], "thinker_only", training.extra_field_specs
    )
    batch = {fake.CODEC_KEY: [[[1, 2]] * 3, [[3, 4]] * 2]}
    testing.check_prepare_model_inputs(training, {"input_ids": [1]}, batch, fake_config)


def test_fake_package_is_found_through_its_entry_point(fake_package_dir: Path) -> None:
    """In a fresh interpreter, nothing imports the fake package: the registry lookup does."""
    script = textwrap.dedent(
        """
        import sys
        from omni_contracts import get_rollout_adapter, testing, training_adapters
        assert "fake_omni_model" not in sys.modules
        names = [p.describe() for p in training_adapters.loader.installed()]
        assert "fake_omni = fake_omni_model (from fake-omni-model)" in names, names
        adapter = get_rollout_adapter("fake_omni")
        import fake_omni_model
        testing.check_training_registration(
            fake_omni_model.FakeThinkerAdapter, "FakeOmniForConditionalGeneration", "thinker"
        )
        print(type(adapter).__qualname__)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(fake_package_dir)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "FakeRolloutAdapter"


def test_wrong_registration_is_reported(fake: ModuleType) -> None:
    with pytest.raises(ContractViolation, match=r"resolves to FakeThinkerAdapter, not Other"):
        testing.check_training_registration(
            type("Other", (fake.FakeThinkerAdapter,), {}), fake.FAKE_ARCH, "thinker"
        )


# --- training side, broken ---------------------------------------------------------------


def test_override_that_skips_super_leaves_modules(fake: ModuleType, fake_model: Any, fake_config: Any) -> None:
    class ForgetsSuper(fake.FakeThinkerAdapter):  # type: ignore[name-defined, misc]
        def configure_model(self, module: Any, model_config: Any) -> None:
            module._no_split_modules = ["FakeDecoderLayer"]

    with pytest.raises(ContractViolation, match=r"still exist after configure_model.*must call super\(\)"):
        testing.check_strip_modules(ForgetsSuper(), fake_model, fake_config)


def test_a_forward_rebound_on_the_instance_is_refused(fake: ModuleType, fake_model: Any, fake_config: Any) -> None:
    class Rebinds(fake.FakeThinkerAdapter):  # type: ignore[name-defined, misc]
        def configure_model(self, module: Any, model_config: Any) -> None:
            super().configure_model(module, model_config)
            module.forward = module.thinker.forward

    Rebinds().configure_model(fake_model, fake_config)
    with pytest.raises(ContractViolation, match=r"\['FakeOmniModel.forward'\] are re-bound.*policy_class"):
        testing.check_no_rebound_methods(fake_model)


def test_strip_list_naming_absent_modules(fake: ModuleType, fake_model: Any, fake_config: Any) -> None:
    class Typo(fake.FakeThinkerAdapter):  # type: ignore[name-defined, misc]
        def get_strip_modules(self, model_config: Any) -> Sequence[str]:
            return ["talker", "code_predictor"]

    with pytest.raises(ContractViolation, match=r"names \['code_predictor'\], which do not exist"):
        testing.check_strip_modules(Typo(), fake_model, fake_config)


def test_no_split_modules_must_name_present_layer_classes(fake_model: Any) -> None:
    with pytest.raises(ContractViolation, match=r"_no_split_modules is None"):
        testing.check_no_split_modules(fake_model)
    fake_model._no_split_modules = ["Qwen3DecoderLayer"]
    with pytest.raises(
        ContractViolation,
        match=r"names \['Qwen3DecoderLayer'\].*Layer-like classes present: \['FakeDecoderLayer'\]",
    ):
        testing.check_no_split_modules(fake_model)


def test_missing_chat_template_is_reported(fake: ModuleType, fake_config: Any) -> None:
    class NoTemplate(fake.FakeThinkerAdapter):  # type: ignore[name-defined, misc]
        def configure_processor(self, model_path: str, model_config: Any) -> Any:
            return SimpleNamespace(tokenizer=SimpleNamespace(chat_template=None))

    with pytest.raises(ContractViolation, match=r"configure_processor\('/ckpt'\) returned SimpleNamespace without a chat template"):
        testing.check_chat_templates(NoTemplate(), "/ckpt", fake_config)


def test_processor_missing_an_engine_member_is_reported(fake: ModuleType, fake_config: Any) -> None:
    from omni_contracts import OmniProcessor, require_omni_processor

    class NoRope(fake.FakeThinkerAdapter):  # type: ignore[name-defined, misc]
        def configure_processor(self, model_path: str, model_config: Any) -> Any:
            return SimpleNamespace(tokenizer=SimpleNamespace(chat_template="t"))

    assert isinstance(fake.FakeThinkerAdapter().configure_processor("/ckpt", fake_config), OmniProcessor)
    with pytest.raises(ContractViolation, match=r"returned SimpleNamespace, which lacks \['pad_token_ids', 'dedup_pad_tokens', 'get_rope_index', 'get_rope_index_kwargs'\]"):
        testing.check_processor(NoRope(), "/ckpt", fake_config)
    with pytest.raises(TypeError, match=r"NoRope.configure_processor returned SimpleNamespace, which lacks"):
        require_omni_processor(NoRope().configure_processor("/ckpt", fake_config), NoRope())


class TextTokenizer:
    """What a text-only causal LM's ``configure_processor`` returns: its tokenizer, which
    templates and encodes prompts and has none of the media members."""

    chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"

    def apply_chat_template(self, messages: Any, **kwargs: Any) -> str:
        return "".join(m["content"] for m in messages)

    def __call__(self, text: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"input_ids": [[1, 2]]}


def test_a_text_only_model_needs_no_media_members_of_its_processor(fake: ModuleType, fake_config: Any) -> None:
    """A causal LM package written against the public API before OmniProcessor existed: its
    adapter declares no modalities (text only) and its processor is its tokenizer. Today both
    engines refused it ("lacks ['pad_token_ids', ...]")."""
    from omni_contracts import TrainingAdapter, require_omni_processor

    class TextAdapter(TrainingAdapter):
        def get_strip_modules(self, model_config: Any) -> Sequence[str]:
            return ()

        def configure_processor(self, model_path: str, model_config: Any) -> Any:
            return TextTokenizer()

        def configure_tokenizer(self, model_path: str, model_config: Any) -> Any:
            return TextTokenizer()

    assert TextAdapter.modalities == ("text",) and not TextAdapter.takes_media()
    require_omni_processor(TextTokenizer(), TextAdapter())
    testing.check_processor(TextAdapter(), "/ckpt", fake_config)
    testing.check_chat_templates(TextAdapter(), "/ckpt", fake_config)

    class Unusable(TextAdapter):
        def configure_processor(self, model_path: str, model_config: Any) -> Any:
            return SimpleNamespace(tokenizer=TextTokenizer())

    with pytest.raises(ContractViolation, match=r"returned SimpleNamespace, which cannot template and encode prompts"):
        testing.check_processor(Unusable(), "/ckpt", fake_config)

    class MediaAdapter(TextAdapter):  # the same processor is refused once the model takes media
        modalities = ("text", "audio")

    assert MediaAdapter.takes_media()
    with pytest.raises(TypeError, match=r"lacks \['pad_token_ids', .*\]: a model that takes media \(text, audio\)"):
        require_omni_processor(TextTokenizer(), MediaAdapter())
    with pytest.raises(ContractViolation, match=r"which lacks \['pad_token_ids'"):
        testing.check_processor(MediaAdapter(), "/ckpt", fake_config)


@pytest.mark.parametrize("modalities", [("image",), ("text", "smell"), "text"])
def test_modalities_outside_the_vocabulary_are_refused_at_registration(modalities: Any) -> None:
    from omni_contracts import RegistrationError, TrainingAdapter

    class Odd(TrainingAdapter):
        def get_strip_modules(self, model_config: Any) -> Sequence[str]:
            return ()

        def configure_processor(self, model_path: str, model_config: Any) -> Any:
            return None

        def configure_tokenizer(self, model_path: str, model_config: Any) -> Any:
            return None

    Odd.modalities = modalities
    with pytest.raises(RegistrationError, match=r"Odd.modalities is .*; declare a tuple holding 'text' and any of 'image', 'audio', 'video'"):
        TrainingAdapter.register("OddForCausalLM", stage="all")(Odd)


def test_prepare_model_inputs_that_ignores_its_fields(fake: ModuleType, fake_config: Any) -> None:
    class Lenient(fake.FakeThinkerAdapter):  # type: ignore[name-defined, misc]
        def prepare_model_inputs(
            self, model_inputs: dict[str, Any], micro_batch: Mapping[str, Any], model_config: Any
        ) -> dict[str, Any]:
            return model_inputs

    batch = {fake.CODEC_KEY: [[[1, 2]]]}
    with pytest.raises(ContractViolation, match=r"accepted a micro-batch with a wrongly shaped row for 'fake_omni.codec_ids'"):
        testing.check_prepare_model_inputs(Lenient(), {"input_ids": [1]}, batch, fake_config)


def test_prepare_model_inputs_that_drops_inputs(fake: ModuleType, fake_config: Any) -> None:
    class Dropper(fake.FakeThinkerAdapter):  # type: ignore[name-defined, misc]
        def prepare_model_inputs(
            self, model_inputs: dict[str, Any], micro_batch: Mapping[str, Any], model_config: Any
        ) -> dict[str, Any]:
            return {}

    with pytest.raises(ContractViolation, match=r"dropped model inputs \['input_ids'\]"):
        testing.check_prepare_model_inputs(Dropper(), {"input_ids": [1]}, {fake.CODEC_KEY: [[[1, 2]]]}, fake_config)


def test_example_batch_must_hold_required_fields(fake: ModuleType, fake_config: Any) -> None:
    with pytest.raises(ContractViolation, match=r"lacks required fields \['fake_omni.codec_ids'\]"):
        testing.check_prepare_model_inputs(fake.FakeThinkerAdapter(), {}, {}, fake_config)


# --- rollout side, broken -----------------------------------------------------------------


def rollout_variant(fake: ModuleType, **methods: Any) -> Any:
    return type("Variant", (fake.FakeRolloutAdapter,), methods)()


def test_flags_for_a_missing_stage(fake: ModuleType) -> None:
    adapter = rollout_variant(fake, rollout_flags=lambda self, mode: {3: {}})
    with pytest.raises(ContractViolation, match=r"flags for stage 3, but the pipeline's stages are \[0\]"):
        testing.check_rollout_modes(adapter)


def test_flags_contradicting_the_topology(fake: ModuleType) -> None:
    adapter = rollout_variant(fake, rollout_flags=lambda self, mode: {0: {"return_hidden_states": True}})
    with pytest.raises(ContractViolation, match=r"'thinker_only': rollout_flags says return_hidden_states=True"):
        testing.check_rollout_modes(adapter)


def test_policy_stage_outside_the_pipeline(fake: ModuleType) -> None:
    adapter = rollout_variant(fake, policy_stage_id=lambda self, mode: 1)
    with pytest.raises(ContractViolation, match=r"'thinker_only': policy_stage_id 1 is not among \[0\]"):
        testing.check_rollout_modes(adapter)


def test_invalid_topology(fake: ModuleType) -> None:
    adapter = rollout_variant(
        fake, build_stage_configs=lambda self, mode: [StageConfig(0, "A", "text")]
    )
    with pytest.raises(ContractViolation, match=r"build_stage_configs\('thinker_only'\) is invalid: No stage is marked final_output"):
        testing.check_rollout_modes(adapter)


def test_unknown_mode_must_raise(fake: ModuleType) -> None:
    adapter = rollout_variant(fake, get_pipeline_id=lambda self, mode: "fake")
    with pytest.raises(ContractViolation, match=r"get_pipeline_id\('__no_such_mode__'\) did not raise UnknownModeError"):
        testing.check_rollout_modes(adapter)

    def vague(self: Any, mode: str) -> str:
        if mode not in self.modes:
            raise UnknownModeError("bad mode")
        return "fake"

    with pytest.raises(ContractViolation, match=r"must name it and every valid mode"):
        testing.check_rollout_modes(rollout_variant(fake, get_pipeline_id=vague))


def test_combiner_that_fails_on_an_empty_list(fake: ModuleType) -> None:
    adapter = rollout_variant(fake, combine_engine_outputs=lambda self, outputs, mode: (outputs[0],))
    with pytest.raises(ContractViolation, match=r"failed on no outputs in mode 'thinker_only': IndexError"):
        testing.check_combine_engine_outputs(adapter)


def test_combiner_that_keeps_a_non_final_stage(fake: ModuleType) -> None:
    def keep_all(self: Any, outputs: Sequence[StageOutput], mode: str) -> tuple[StageOutput, ...]:
        return tuple(outputs)

    variant = type("KeepAll", (fake.FakeRolloutAdapter,), {"combine_engine_outputs": keep_all})
    stages = [
        StageConfig(0, "T", "text", final_output=True),
        StageConfig(1, "K", "codec", inputs=(0,)),
    ]
    variant.build_stage_configs = lambda self, mode: stages
    with pytest.raises(ContractViolation, match=r"kept a stage not marked final_output .*final stages: \[0\]"):
        testing.check_combine_engine_outputs(variant())


def test_combiner_that_invents_outputs(fake: ModuleType) -> None:
    adapter = rollout_variant(
        fake, combine_engine_outputs=lambda self, outputs, mode: (StageOutput(0, (9,)),)
    )
    with pytest.raises(ContractViolation, match=r"returned outputs it was not given on outputs"):
        testing.check_combine_engine_outputs(adapter)


def test_postprocess_with_undeclared_or_misshaped_fields(fake: ModuleType) -> None:
    specs = fake.FakeThinkerAdapter.extra_field_specs
    rollout = fake.FakeRolloutAdapter()
    undeclared = codec_sample(fake, **{"fake_omni.codes": [1]})
    with pytest.raises(ContractViolation, match=r"'fake_omni.codes' is not declared"):
        testing.check_postprocess_alignment(rollout, undeclared, [], "thinker_only", specs)
    misshaped = codec_sample(fake, **{fake.CODEC_KEY: [[0, 0]] * 5})
    with pytest.raises(ContractViolation, match=r"axis 0 is 'response_length' = 2 elsewhere"):
        testing.check_postprocess_alignment(rollout, misshaped, [], "thinker_only", specs)


def test_postprocess_returning_a_misaligned_sample(fake: ModuleType) -> None:
    def misalign(self: Any, sample: RolloutSample, outputs: Any, mode: str) -> RolloutSample:
        object.__setattr__(sample, "response_mask", sample.response_mask[:-1])  # bypasses checks
        return sample

    adapter = rollout_variant(fake, postprocess_agent_loop_output=misalign)
    specs = fake.FakeThinkerAdapter.extra_field_specs
    with pytest.raises(ContractViolation, match=r"\{'response_mask': 1\} do not align with 2 response_ids"):
        testing.check_postprocess_alignment(adapter, codec_sample(fake), [], "thinker_only", specs)


def test_extra_field_specs_keyed_by_their_own_key(fake: ModuleType) -> None:
    spec = fake.FakeThinkerAdapter.extra_field_specs[fake.CODEC_KEY]
    with pytest.raises(ContractViolation, match=r"entry 'fake_omni.other' holds a spec for 'fake_omni.codec_ids'"):
        testing.check_extra_field_keys({"fake_omni.other": spec})


def test_thinker_policy_check_catches_extra_stages_renamed_or_stale_weights_and_foreign_accessors() -> None:
    import torch
    from torch import nn

    class Thinker(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.head = nn.Embedding(8, 4), nn.Linear(4, 8)

        def get_input_embeddings(self) -> nn.Module:
            return self.embed

        def get_output_embeddings(self) -> nn.Module:
            return self.head

    class Full(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.thinker, self.talker = Thinker(), nn.Linear(4, 4)

    class Policy(nn.Module):
        def __init__(self, wrong_accessor: bool = False) -> None:
            super().__init__()
            self.thinker = Thinker()
            self.wrong_accessor = wrong_accessor

        def get_input_embeddings(self) -> nn.Module:
            return self.thinker.head if self.wrong_accessor else self.thinker.get_input_embeddings()

        def get_output_embeddings(self) -> nn.Module:
            return self.thinker.get_output_embeddings()

    torch.manual_seed(0)
    full = Full()
    policy = Policy()
    policy.thinker.load_state_dict(full.thinker.state_dict())
    testing.check_thinker_policy(policy, full)

    policy.talker = nn.Linear(4, 4)
    with pytest.raises(ContractViolation, match=r"builds \['thinker', 'talker'\]"):
        testing.check_thinker_policy(policy, full)
    del policy.talker
    with torch.no_grad():
        policy.thinker.head.bias.add_(1.0)
    with pytest.raises(ContractViolation, match=r"1 tensors differ.*thinker.head.bias"):
        testing.check_thinker_policy(policy, full)
    renamed = Policy()
    renamed.thinker.extra = nn.Linear(1, 1)
    with pytest.raises(ContractViolation, match=r"names differ.*extra \['thinker.extra.bias'"):
        testing.check_thinker_policy(renamed, full)
    foreign = Policy(wrong_accessor=True)
    foreign.thinker.load_state_dict(full.thinker.state_dict())
    with pytest.raises(ContractViolation, match=r"get_input_embeddings\(\) is not the thinker's"):
        testing.check_thinker_policy(foreign, full)
