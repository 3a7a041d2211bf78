"""verl's and verl-omni's keys no engine here reads are refused with their theme's reason and
what to use instead (:mod:`omni_trainer.foreign_keys`), never as a bare unknown key; one key of
each theme, as verl-omni's Qwen3-Omni launchers set it."""

from __future__ import annotations

import pytest

from omni_trainer.config import ConfigError, all_keys, load_config
from omni_trainer.foreign_keys import THEMES, foreign_message

LAUNCHER_KEYS = {
    # Megatron (run_qwen3_omni_megatron_*_separate_async.sh, ..._geo3k_megatron_fully_async.sh)
    "actor_rollout_ref.actor.megatron.expert_model_parallel_size=4": "Megatron engine",
    "actor_rollout_ref.ref.megatron.override_transformer_config={gradient_accumulation_fusion:false}": "Megatron",
    "actor_rollout_ref.actor.optim.use_precision_aware_optimizer=true": "Megatron engine",
    # VeOmni (run_qwen3_omni_thinker_gspo_veomni.sh)
    "actor_rollout_ref.actor.veomni.expert_parallel_size=8": "VeOmni engine",
    "model_engine=veomni": "VeOmni engine",
    # verl's Megatron LoRA section
    "actor_rollout_ref.model.lora.rank=0": "actor_rollout_ref.model.lora_rank",
    # Ascend NPUs (..._opd_npu.sh)
    "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.additional_config={weight_nz_mode:0}": "vllm-ascend",
    # verl's V1 asynchronous trainers (..._colocate_async_v1.sh, ..._separate_async_v1.sh)
    "trainer.v1.trainer_mode=omni_colocate_async": "async_training.max_staleness=1",
    "trainer.v1.separate_async.parameter_sync_step=8": "async_training.trigger_parameter_sync_step=T",
    "actor_rollout_ref.rollout.nnodes=4": "rollout.nnodes and rollout.n_gpus_per_node",
    # DAPO (dapo_trainer/qwen3_omni)
    "algorithm.filter_groups.enable=true": "DAPO",
    "reward.reward_kwargs.overlong_buffer_cfg.len=1024": "DAPO",
    # NitroBrew OPD (..._nitrobrew_opd_npu.sh), the OPD teacher's engine (..._opd.sh)
    "actor_rollout_ref.rollout.agent.agent_loop_manager_class=x.NitroBrewManager": "distillation.enabled=true",
    "distillation.teacher_models.teacher_model.inference.response_length=12288": "data.max_response_length",
    # vLLM engine knobs omni-rl sets itself
    "actor_rollout_ref.rollout.logprobs_mode=raw_logprobs": "log-probs as the actor computes them",
    "actor_rollout_ref.rollout.max_model_len=4096": "data.max_prompt_length + data.max_response_length",
    # verl-omni's model dispatch and dataset classes (the offline DPO launcher's keys among them)
    "actor_rollout_ref.model.model_type=omni_model": "actor_rollout_ref.model.path",
    "actor_rollout_ref.model.trust_remote_code=true": "no remote code",
    "actor_rollout_ref.actor._target_=verl_omni.workers.config.omni.OmniVeOmniActorConfig": "OmniModelConfig",
    "data.custom_cls.collate_fn=offline_mllm_dpo_collate_fn": "trainer convert",
    "data.mm_configs={scale_factor:28}": "trainer convert",
    "data.pad_mode=no_padding": "pads and collates",
    "data.trust_remote_code=true": "no remote code",
    "actor_rollout_ref.model.hf_config_path=/m": "actor_rollout_ref.model.path",
    "actor_rollout_ref.model.tokenizer_path=/m": "actor_rollout_ref.model.path",
    "actor_rollout_ref.model.architecture=Qwen3OmniMoeForConditionalGeneration": "config.json names",
    "actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params=100000000": "decoder layers",
    "actor_rollout_ref.actor.shuffle=false": "data.shuffle",
    "trainer.rollout_data_dir=/tmp/rollouts": "trainer.log_val_generations",
}


@pytest.mark.parametrize("override", LAUNCHER_KEYS)
def test_a_launcher_key_omni_rl_does_not_have_is_refused_with_why_and_what_instead(override: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config([override])
    (problem,) = info.value.problems
    key = override.partition("=")[0]
    assert problem.startswith(key.split("={")[0]) and " is a " in problem and "omni-rl does not have" in problem, problem
    assert LAUNCHER_KEYS[override] in problem, problem
    assert "unknown key" not in problem


def test_no_theme_hides_a_key_of_the_schema() -> None:
    """A key omni-rl declares is never refused as another engine's."""
    assert [key for key in all_keys() if foreign_message(key)] == []


def test_a_mistyped_key_still_gets_its_closest_known_key() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(["actor_rollout_ref.rollout.temprature=0.5"])
    assert "did you mean 'actor_rollout_ref.rollout.temperature'?" in str(info.value)


def test_every_theme_says_what_to_do() -> None:
    assert all(theme.instead.endswith(("drop it", "synchronous run")) for theme in THEMES)
