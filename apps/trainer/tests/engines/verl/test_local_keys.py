"""Local-engine keys on the verl engine: honoured or refused by name, never ignored in silence.

The mirror of ``test_verl_keys.py``. Before these refusals, ``trainer.engine=verl`` with
``actor_rollout_ref.actor.dtype=bfloat16``, ``model.lora_dropout=0.05``, ``trainer.seed=7`` or
the in-process teacher's offload changed nothing in verl's config and said nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from omni_trainer.config import Config, all_keys, load_config
from omni_trainer.engines.verl.local_keys import verl_refusals
from omni_trainer.keys import declared_keys
from omni_trainer.engines.verl.translate import config_problems, verl_defaults
from omni_trainer.engines.local.verl_keys import local_refusals

SRC = Path(__file__).resolve().parents[3] / "src" / "omni_trainer"
VERL = ["trainer.engine=verl", "actor_rollout_ref.model.path=/m", "data.train_files=[/d.parquet]"]
TEACHER = ["distillation.enabled=true", "distillation.teacher_models.teacher_model.model_path=/t"]

REFUSED = {
    "actor_rollout_ref.actor.dtype": ("bfloat16", "auto"),
    "actor_rollout_ref.actor.old_log_prob": ("auto", "recompute"),
    "actor_rollout_ref.model.lora_dropout": ("0.05", "0"),
    "trainer.seed": ("7", None),
    "distillation.teacher_models.teacher_model.log_prob_micro_batch_size_per_gpu": ("4", None),
    "distillation.teacher_models.teacher_model.param_offload": ("true", "false"),
    "trainer.talker_drift": ("true", "false"),
    "trainer.talker_drift_rewards": ("[{name: duration, weight: 1.0}]", "[]"),
    "actor_rollout_ref.actor.talker_drift_coef": ("0.5", "0"),
}
"""Each refused key: a value the verl engine refuses, and one it honours (None: none)."""

READ_BY_THE_VERL_ENGINE = {
    "data.builtin_task_size": "builtin_files.py",
    "data.on_bad_row": "../../../../packages/omni-verl/src/omni_verl/dataset.py",  # passed through (declared), read by our dataset class
    "data.spoken_text": "engines/verl/tasks.py",  # the talker half refuses the local engine's
    "data.max_spoken_tokens": "engines/verl/translate.py",
    "data.use_audio_in_video": "engines/verl/translate.py",
    "data.soundtrack_as_audio": "engines/verl/translate.py",
    "data.train_sampler.class_path": "config.py",  # both engines: the sampler is chosen by class_name (SamplerConfig)
    "data.train_sampler.class_name": "preflight.py",
    "data.train_sampler.sampler_kwargs": "preference_pairs.py",  # the offline step both engines share
    "data.val_sampler.class_path": "config.py",
    "data.val_sampler.class_name": "preflight.py",
    "data.val_sampler.sampler_kwargs": "config.py",  # the same on both engines (SamplerConfig)
    "data.balance_max_samples_by_modality": "preference_pairs.py",
    "actor_rollout_ref.model.stage": "engines/verl/translate.py",
    "actor_rollout_ref.model.target_parameters": "engines/verl/translate.py",
    "actor_rollout_ref.model.freeze_vision_tower": "engines/verl/translate.py",
    "actor_rollout_ref.model.freeze_audio_tower": "engines/verl/translate.py",
    "actor_rollout_ref.model.lora_dtype": "engines/verl/translate.py",
    "actor_rollout_ref.actor.trainer_type": "preflight.py",
    "actor_rollout_ref.actor.omni_loss.loss_mode": "settings_builders.py",
    "actor_rollout_ref.actor.omni_loss.loss_type": "settings_builders.py",
    "actor_rollout_ref.actor.omni_loss.beta": "preference_pairs.py",
    "actor_rollout_ref.actor.omni_loss.label_smoothing": "preference_pairs.py",
    "actor_rollout_ref.actor.omni_loss.average_log_prob": "preference_pairs.py",
    "actor_rollout_ref.actor.omni_loss.simpo_gamma": "preference_pairs.py",
    "actor_rollout_ref.actor.omni_loss.refer_model_precision": "config.py",  # verl-omni reads it nowhere either
    "actor_rollout_ref.rollout.pipeline_name": "engines/verl/translate.py",
    "reward.reward_model.rollout.name": "engines/verl/translate.py",  # verl's is ??? (required): passed through
    "actor_rollout_ref.rollout.pipeline_mode": "engines/verl/translate.py",
    "actor_rollout_ref.rollout.speaker": "engines/verl/tasks.py",
    "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.pipeline_name": "config.py",  # an alias (KEY_ALIASES)
    "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.pipeline_mode": "config.py",  # an alias
    "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.output_mode": "engines/verl/translate.py",
    "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.max_num_seqs": "config.py",  # an alias
    "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.stage_configs_path": "preflight.py",  # refused on both
    "actor_rollout_ref.rollout.name": "engines/verl/translate.py",
    "algorithm.sample_source": "tasks.py",  # names the task (task_name)
    "algorithm.trainer_type": "preflight.py",  # must agree with sample_source
    "algorithm.paired_preference": "preflight.py",
    "reward.custom_reward_function.reward_kwargs": "engines/verl/translate.py",
    "reward.timeout_s": "../../../../packages/omni-verl/src/omni_verl/reward.py",
    "reward.on_unknown_data_source": "../../../../packages/omni-verl/src/omni_verl/reward.py",
    "reward.max_error_rate": "engines/verl/translate.py",
    "reward.audio_rewards": "engines/verl/translate.py",
    "trainer.engine": "engines/__init__.py",
    "trainer.max_checkpoints_to_keep": "engines/verl/translate.py",
    "trainer.resume_anyway": "engines/verl/launch.py",
    "ray_kwargs.ray_init.address": "engines/verl/translate.py",
    "ray_kwargs.ray_init.num_gpus": "engines/verl/translate.py",
    "ray_kwargs.ray_init.runtime_env.env_vars": "engines/verl/translate.py",
    **{f"async_training.{key}": "engines/verl/async_training.py" for key in (
        "max_staleness", "staleness_threshold", "trigger_parameter_sync_step", "require_batches", "partial_rollout",
        "concurrent_samples_per_replica", "use_trainer_do_validate", "use_dynamic_resource_scheduling")},
    "rollout.nnodes": "engines/verl/async_training.py",
    "rollout.n_gpus_per_node": "engines/verl/async_training.py",
    "rollout.total_rollout_steps": "engines/verl/async_training.py",
}
"""Every key of ours that verl's own config lacks, and where the verl engine (or the pre-flight
on its behalf) reads it."""
LOCAL_ONLY = {declared.name for declared in declared_keys(Config) if declared.doc.engines == "local"}
"""The keys declared as read by the local engine only (``engines="local"``)."""


def test_every_key_verl_lacks_is_read_by_the_verl_engine_or_refused_there() -> None:
    """A new key of ours must say what the verl engine does with it: read it (and where) or
    refuse it (engines.verl.local_keys); otherwise verl would drop it in silence."""
    defaults = verl_defaults()
    ours = {key for key in all_keys() if OmegaConf.select(defaults, key, default=KeyError) is KeyError}
    classified = set(READ_BY_THE_VERL_ENGINE) | LOCAL_ONLY
    assert not READ_BY_THE_VERL_ENGINE.keys() & LOCAL_ONLY
    assert ours - classified == set(), "classify these: read by the verl engine (where), or declared engines='local'"
    assert classified - ours == set(), "verl's config has these now: drop them here"
    for key, module in READ_BY_THE_VERL_ENGINE.items():
        assert key.split(".")[-1] in (SRC / module).read_text(), f"{key} is not read in {module}"
    assert set(REFUSED) == LOCAL_ONLY


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_a_local_engine_key_is_refused_by_name_on_verl_unless_its_value_says_what_verl_does(key: str) -> None:
    refused, honoured = REFUSED[key]
    extra = TEACHER if key.startswith("distillation.") else []
    (problem,) = verl_refusals(load_config([*VERL, *extra, f"{key}={refused}"]))
    assert problem.startswith(f"{key}=") and " is a local-engine setting (" in problem
    assert "trainer.engine=local" in problem
    assert problem in config_problems(load_config([*VERL, *extra, f"{key}={refused}"]))  # the pre-flight's verl check
    if honoured is not None:
        assert verl_refusals(load_config([*VERL, *extra, f"{key}={honoured}"])) == []
    assert verl_refusals(load_config([*VERL, *extra])) == []  # the defaults are not the user's
    assert local_refusals(load_config([*extra, f"{key}={refused}"])) == []  # the local engine's own key


def test_the_local_judge_answers_with_verls_reward_model_defaults() -> None:
    """The local engine cannot read verl's composed config; its judge's values for the unset
    ``reward.reward_model.rollout`` keys are verl's, but for the batch (verl's 1024 sizes a vLLM
    server's, the local judge answers 16 requests in one ``generate``)."""
    from omni_trainer.settings_builders import JUDGE_DEFAULTS

    verl = verl_defaults().reward.reward_model.rollout
    assert {name: value for name, value in JUDGE_DEFAULTS.items() if name != "max_num_seqs"} == {
        name: verl[name] for name in JUDGE_DEFAULTS if name != "max_num_seqs"}
    assert (JUDGE_DEFAULTS["max_num_seqs"], verl.max_num_seqs) == (16, 1024)
