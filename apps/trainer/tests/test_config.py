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
    assert embedded.actor_rollout_ref.actor.optim.lr == 0.01
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
