"""Each key declared once (``omni_trainer.keys``): the range checks, the choices, both engines'
refusals and verl's pass-through values come from the declaration on the schema field."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from omni_trainer.config import Config, TrainerConfig, load_config
from omni_trainer.findings import Findings
from omni_trainer.keys import choice_problems, declared_keys, help_text, key, range_problems


@dataclass
class ExampleTrainer(TrainerConfig):
    example_budget: int = key(4, "an example verl-only key, declared here and nowhere else", engines="verl",
                              other_engine="has nothing to budget", at_least=1)


@dataclass
class ExampleConfig(Config):
    trainer: TrainerConfig = field(default_factory=ExampleTrainer)


def example(budget: int, *given: str) -> ExampleConfig:
    config = ExampleConfig()
    config.data.train_files = ["/d.parquet"]
    config.actor_rollout_ref.model.path = "/m"
    config.actor_rollout_ref.rollout.pipeline_name = "qwen3_omni_moe"
    assert isinstance(config.trainer, ExampleTrainer)
    config.trainer.example_budget = budget
    config.given_keys = list(given)
    return config


def test_a_key_declared_once_is_range_checked_by_the_preflight() -> None:
    from omni_trainer.preflight import _ranges

    found = Findings()
    _ranges(SimpleNamespace(config=example(0)), found)  # type: ignore[arg-type]
    assert found.problems == ["trainer.example_budget=0 must be >= 1"]
    found = Findings()
    _ranges(SimpleNamespace(config=example(3)), found)  # type: ignore[arg-type]
    assert found.problems == []


def test_a_key_declared_once_is_refused_by_the_engine_that_does_not_read_it() -> None:
    from omni_trainer.engines.verl.local_keys import verl_refusals
    from omni_trainer.engines.local.verl_keys import local_refusals

    (problem,) = local_refusals(example(3, "trainer.example_budget"))
    assert problem == (
        "trainer.example_budget=3 is a verl-engine setting (an example verl-only key, declared here and nowhere "
        "else); the local engine has nothing to budget. Drop it, or use trainer.engine=verl"
    )
    assert local_refusals(example(3)) == []  # the default is not the user's
    assert verl_refusals(example(3, "trainer.example_budget")) == []  # verl reads it


def test_a_key_declared_once_reaches_verl_at_its_own_path() -> None:
    pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed)")
    from omni_trainer.engines.verl.translate import to_verl_config

    config = example(3, "trainer.example_budget")
    config.trainer.engine = "verl"
    verl = to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None)
    assert verl.trainer.example_budget == 3
    assert verl.trainer.total_training_steps is None  # an unset key leaves verl's default


def test_help_config_prints_the_declaration() -> None:
    assert help_text(ExampleConfig, "trainer.example_budget") == (
        "trainer.example_budget: int = 4\n"
        "  an example verl-only key, declared here and nowhere else\n"
        "  range: >= 1\n"
        "  read by: the verl engine (the local engine has nothing to budget)\n"
        "  verl: as trainer.example_budget"
    )
    assert help_text(Config, "trainer.example_budget") is None


def test_the_cli_prints_a_keys_help_and_names_the_closest_key_of_a_typo(capsys: pytest.CaptureFixture[str]) -> None:
    from omni_trainer.cli import main

    assert main(["--help-config", "actor_rollout_ref.rollout.top_p"]) == 0
    assert capsys.readouterr().out.splitlines()[:3] == [
        "actor_rollout_ref.rollout.top_p: float = 1.0", "  nucleus sampling mass", "  range: > 0 and <= 1",
    ]
    assert main(["--help-config", "actor_rollout_ref.rollout.top_pp"]) == 2
    assert "did you mean actor_rollout_ref.rollout.top_p?" in capsys.readouterr().err


@pytest.mark.parametrize(("override", "problem"), [
    ("actor_rollout_ref.rollout.top_p=0", "actor_rollout_ref.rollout.top_p=0.0 must be in (0, 1]"),
    ("actor_rollout_ref.rollout.top_k=0", "actor_rollout_ref.rollout.top_k=0 must be -1 or >= 1 (-1: off)"),
    ("actor_rollout_ref.rollout.temperature=-1", "actor_rollout_ref.rollout.temperature=-1.0 must be >= 0 (0: greedy)"),
    ("algorithm.gamma=1.5", "algorithm.gamma=1.5 must be in [0, 1]"),
    ("actor_rollout_ref.actor.optim.lr=0", "actor_rollout_ref.actor.optim.lr=0.0 must be > 0"),
    ("trainer.save_freq=-2", "trainer.save_freq=-2 must be >= -1"),
    ("reward.num_workers=0", "reward.num_workers=0 must be >= 1, or null (one per CPU)"),
])
def test_a_value_out_of_its_declared_range_names_the_key_and_the_range(override: str, problem: str) -> None:
    assert range_problems(load_config([override])) == [problem]


def test_every_declared_default_is_in_its_own_range_and_choices() -> None:
    """A declaration contradicting its default would refuse every run that leaves the key alone."""
    config = Config()
    assert range_problems(config) == []
    assert choice_problems(config) == []
    for declared in declared_keys(Config):
        assert declared.doc.help, declared.name
        assert (declared.doc.engines == "both") != bool(declared.doc.other_engine), declared.name
        if declared.doc.honoured:
            assert declared.doc.engines != "both", declared.name


def test_a_subclassed_section_is_walked_as_its_own_class() -> None:
    names = [declared.name for declared in declared_keys(example(4))]
    assert "trainer.example_budget" in names and "trainer.example_budget" not in [
        declared.name for declared in declared_keys(Config)]
    assert dataclasses.is_dataclass(ExampleConfig)


def test_the_schemas_rollout_correction_is_omni_trainings_settings_field_for_field() -> None:
    """The schema declares verl's seven keys (help, route); the local engine hands them to
    omni-training as they are (``settings_builders.correction_settings``): same names, same
    defaults (verl 0.9.1's)."""
    from omni_trainer.config import RolloutCorrectionConfig
    from omni_training.rollout_correction import CorrectionSettings

    schema = {f.name: f.default for f in dataclasses.fields(RolloutCorrectionConfig)}
    settings = {f.name: f.default for f in dataclasses.fields(CorrectionSettings)}
    assert schema == settings


DERIVED_FIELDS = {
    "ActorSettings.policy_loss.loss_scale_factor": "the run's data.max_response_length when the key is unset, "
                                                   "as the translation gives verl",
    "ActorSettings.dtype": "actor.dtype=auto resolves by device",
    "SamplingSettings.seed": "each step's seed, from trainer.seed and the step (settings_builders.rollout_seed)",
}
"""Component fields whose built value is computed from the run, not copied from one key."""


def _disagreements(built: Any, owner: str) -> list[str]:
    """The fields of ``built`` whose component default differs from the value the schema's
    defaults gave them (a field without a default cannot disagree)."""
    found = []
    for f in dataclasses.fields(built):
        value, name = getattr(built, f.name), f"{owner}.{f.name}"
        if dataclasses.is_dataclass(value):
            found += _disagreements(value, name)
        elif f.default is not dataclasses.MISSING and f.default != value and name not in DERIVED_FIELDS:
            found.append(f"{name}: component default {f.default!r}, schema default {value!r}")
    return found


def test_component_settings_default_to_the_schemas_values_or_have_no_default() -> None:
    """Every settings object the config builds, built from the schema's defaults: a component
    field that keeps a default keeps the schema's (it is declared once, on the schema; a
    component default that disagreed, such as lr 1e-6 against 3e-6, was removed)."""
    from omni_trainer import settings_builders as build

    config = Config()
    config.distillation.enabled = True
    built = [
        build.actor_settings(config, build.distillation_settings(config), device="cpu"),
        build.lora_settings(config), build.optim_settings(config, total_steps=None), build.correction_settings(config),
        build.sampling_settings(config, step=0), build.reward_manager_config(config),
    ]
    assert [problem for settings in built for problem in _disagreements(settings, type(settings).__name__)] == []


def test_the_defaults_check_catches_a_component_default_that_disagrees() -> None:
    from omni_training.settings import OptimizerSettings

    @dataclasses.dataclass(frozen=True)
    class OldOptimizerSettings(OptimizerSettings):
        lr: float = 1e-6  # the default omni-training had, against the schema's 3e-6

    built = OldOptimizerSettings(lr=Config().actor_rollout_ref.actor.optim.lr)
    assert _disagreements(built, "OptimizerSettings") == [
        "OptimizerSettings.lr: component default 1e-06, schema default 3e-06"]


def test_every_key_of_the_schema_is_declared() -> None:
    """The schema is the one place a key is declared: a new field without its declaration
    (help, engines, route to verl) fails here."""
    from omni_trainer.config import RECORDED_KEYS, all_keys

    declared = [d.name for d in declared_keys(Config)]
    undeclared = [name for name in all_keys() if not any(name == d or name.startswith(d + ".") for d in declared)]
    assert undeclared == []
    assert not set(declared) & set(RECORDED_KEYS)
