from __future__ import annotations

import os
from pathlib import Path

import pytest

from omni_trainer.config import ConfigError, load_config, to_yaml

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize(
    ("name", "overrides"),
    [("defaults_real_model.yaml", ["actor_rollout_ref.model.path=/models/qwen3-omni"]), ("defaults_embedded.yaml", [])],
)
def test_packaged_defaults_are_pinned(name: str, overrides: list[str]) -> None:
    """A change to omni_trainer.yaml, embedded.yaml or the schema shows up here.

    Regenerate deliberately: OMNI_RL_UPDATE_GOLDEN=1 uv run pytest apps/trainer/tests/test_config.py
    """
    resolved = to_yaml(load_config(overrides))
    golden = GOLDEN / name
    if os.environ.get("OMNI_RL_UPDATE_GOLDEN"):
        golden.write_text(resolved)
    assert resolved == golden.read_text()


def test_embedded_preset_only_without_model_or_data() -> None:
    embedded = load_config([])
    real = load_config(["actor_rollout_ref.model.path=/m"])
    data_only = load_config(["data.train_files=[/d/train.parquet]"])
    assert embedded.actor_rollout_ref.actor.optim.lr == 0.007
    assert real.actor_rollout_ref.actor.optim.lr == 3e-6
    assert data_only.actor_rollout_ref.actor.optim.lr == 3e-6
    assert data_only.data.train_files == ["/d/train.parquet"]


def test_precedence_later_groups_win() -> None:
    script = ["actor_rollout_ref.rollout.n=16", "trainer.total_epochs=3"]
    extra = ["actor_rollout_ref.rollout.n=4"]
    config = load_config(script, extra)
    assert config.actor_rollout_ref.rollout.n == 4 and config.trainer.total_epochs == 3
    assert config.trainer.default_local_dir == "runs/tiny-default"
    named = load_config(["trainer.experiment_name=mine"])
    assert named.trainer.default_local_dir == "runs/mine"  # interpolated after overrides


def test_errors_are_reported_together_with_the_closest_key() -> None:
    with pytest.raises(ConfigError) as info:
        load_config([
            "actor_rollout_ref.rollout.temprature=0.7",
            "trainer.total_epochs=many",
            "algorithm.adv_estimatr=rloo",
            "data.train_batch_size",
        ])
    message = str(info.value)
    assert "unknown key 'actor_rollout_ref.rollout.temprature' (in overrides); did you mean 'actor_rollout_ref.rollout.temperature'?" in message
    assert "did you mean 'algorithm.adv_estimator'?" in message
    assert "trainer.total_epochs: 'many' is not valid here" in message
    assert "'data.train_batch_size' is not key=value" in message


def test_closed_choices() -> None:
    with pytest.raises(ConfigError, match=r"trainer.engine='ray'; valid: local, verl"):
        load_config(["trainer.engine=ray"])
    with pytest.raises(ConfigError, match=r"trainer.logger has \['tb'\]; valid: console, tensorboard, wandb"):
        load_config(["trainer.logger=[console,tb]"])


def test_yaml_values_are_typed() -> None:
    config = load_config(["actor_rollout_ref.actor.optim.lr=3e-6", "actor_rollout_ref.model.target_modules=[q_proj,v_proj]",
                          "actor_rollout_ref.actor.clip_ratio_high=null", "trainer.logger=[console]"])
    assert config.actor_rollout_ref.actor.optim.lr == 3e-6
    assert config.actor_rollout_ref.model.target_modules == ["q_proj", "v_proj"]
    assert config.actor_rollout_ref.actor.clip_ratio_high is None


def test_verl_spellings_carry_over() -> None:
    config = load_config([
        "data.train_files=/d/train.parquet", "data.val_files=/d/test.parquet",  # verl: a single path
        "+actor_rollout_ref.rollout.engine_kwargs.vllm_omni.pipeline_name=qwen3_omni_moe",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm_omni.max_num_seqs=64",
        "actor_rollout_ref.rollout.agent.default_agent_loop=omni_single_turn_agent",
        "data.on_bad_row=skip", "+data.mm_processor_kwargs.sampling_rate=16000",
    ])
    assert config.data.train_files == ["/d/train.parquet"] and config.data.val_files == ["/d/test.parquet"]
    assert config.actor_rollout_ref.rollout.max_num_seqs == 64
    assert config.actor_rollout_ref.rollout.agent.default_agent_loop == "single_turn_agent"
    assert config.data.on_bad_row == "skip" and config.data.mm_processor_kwargs == {"sampling_rate": 16000}
    assert config.trainer.test_freq == -1 and config.trainer.val_before_train  # verl's defaults
    with pytest.raises(ConfigError) as info:
        load_config([
            "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
            "+actor_rollout_ref.rollout.engine_kwargs.vllm_omni.pipeline_name=other",
            "+actor_rollout_ref.rollout.engine_kwargs.vllm_omni.output_mode=diffusion",
        ])
    message = str(info.value)
    assert "engine_kwargs.vllm_omni.pipeline_name='other' contradicts actor_rollout_ref.rollout.pipeline_name" in message
    assert "output_mode='diffusion'; valid: ar" in message


@pytest.mark.parametrize(("typed", "meant"), [
    ("actor_rollout_ref.actor.param_offload", "actor_rollout_ref.actor.fsdp_config.param_offload"),  # was clip_ratio_low
    ("actor_rollout_ref.actor.fsdp_config.param_ofload", "actor_rollout_ref.actor.fsdp_config.param_offload"),
    ("actor_rollout_ref.rollout.nn", "actor_rollout_ref.rollout.n"),
    ("trainer.total_epoch", "trainer.total_epochs"),
    ("data.train_file", "data.train_files"),
    ("actor_rollout_ref.actor.use_kl", "actor_rollout_ref.actor.use_kl_loss"),
    ("actor_rollout_ref.rolout.temprature", "actor_rollout_ref.rollout.temperature"),
    ("ray_kwarg.ray_init.adress", "ray_kwargs.ray_init.address"),
])
def test_a_typo_is_matched_on_its_last_segment_and_section(typed: str, meant: str) -> None:
    from omni_trainer.config import closest_keys

    assert closest_keys(typed) == [meant]


@pytest.mark.parametrize("typed", [
    "actor_rollout_ref.actor.optim.learning_rate", "actor_rollout_ref.rollout.gpu_mem_util", "trainer.foo", "x",
])
def test_a_key_close_to_none_gets_no_suggestion(typed: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config([f"{typed}=1"])
    (problem,) = info.value.problems
    assert problem == (f"unknown key {typed!r} (in overrides); no known key is close "
                       "(`uv run trainer --print-config` prints every key)")


def test_a_bare_segment_lists_every_place_it_is_a_key() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(["param_offload=true"])
    assert ("did you mean one of 'actor_rollout_ref.actor.fsdp_config.param_offload', "
            "'actor_rollout_ref.ref.fsdp_config.param_offload', "
            "'distillation.teacher_models.teacher_model.param_offload'?") in str(info.value)


def test_the_given_keys_are_recorded_not_settable_and_not_written() -> None:
    config = load_config(["trainer.nnodes=1"], ["+data.mm_processor_kwargs.sampling_rate=16000", "trainer.nnodes=1"])
    assert config.given_keys == ["trainer.nnodes", "data.mm_processor_kwargs.sampling_rate"]
    assert load_config([]).given_keys == []  # the packaged defaults and presets are not the user's
    assert "given_keys" not in to_yaml(config)
    with pytest.raises(ConfigError, match="given_keys is recorded by the loader"):
        load_config(["given_keys=[trainer.nnodes]"])


def test_verls_spellings_fold_into_ours() -> None:
    config = load_config(["actor_rollout_ref.actor.optim.clip_grad=0.5", "actor_rollout_ref.actor.freeze_vision_tower=false",
                          "trainer.logger=console"])
    assert config.actor_rollout_ref.actor.grad_clip == 0.5
    assert config.actor_rollout_ref.model.freeze_vision_tower is False
    assert config.trainer.logger == ["console"]  # verl takes one logger as a list of one
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.actor.optim.clip_grad=0.5 contradicts "
                                          r"actor_rollout_ref.actor.grad_clip=2.0; set one of them"):
        load_config(["actor_rollout_ref.actor.optim.clip_grad=0.5", "actor_rollout_ref.actor.grad_clip=2.0"])


def test_a_non_finite_float_key_is_refused() -> None:
    """NaN or infinity in a float key made every step's loss or weight non-finite, silently."""
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.actor.optim.lr=inf is not a finite number"):
        load_config(["actor_rollout_ref.actor.optim.lr=inf"])
    with pytest.raises(ConfigError, match=r"algorithm.kl_ctrl.kl_coef=nan is not a finite number"):
        load_config(["trainer.engine=verl", "algorithm.kl_ctrl.kl_coef=nan"])
