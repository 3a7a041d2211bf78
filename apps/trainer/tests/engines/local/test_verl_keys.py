"""verl-engine keys on the local engine: honoured, or refused by name (``omni_trainer.engines.local.verl_keys``)."""

from __future__ import annotations

import pytest

from omni_trainer.config import Config, all_keys, load_config
from omni_trainer.keys import declared_keys
from omni_trainer.engines.local.verl_keys import local_refusals, verl_key
from omni_trainer.resolved import resolve_run


def refusals(*overrides: str) -> list[str]:
    """The local engine's refusals for a run of a model (the packaged defaults, no preset)."""
    return local_refusals(load_config(["actor_rollout_ref.model.path=/m", *overrides]))


def test_every_verl_only_declaration_names_a_key_or_a_section_of_the_schema() -> None:
    keys = all_keys()
    declared = [d for d in declared_keys(Config) if d.doc.engines == "verl"]
    assert len(declared) >= 60  # verl-omni's launchers' placement, offload and vLLM-Omni sizing, and more
    for spec in declared:
        assert spec.name in keys or any(key.startswith(spec.name + ".") for key in keys), spec.name
        assert spec.doc.other_engine, spec.name  # what the local engine does instead


def test_values_from_the_packaged_defaults_are_not_the_users() -> None:
    """omni_trainer.yaml sizes the verl rollout (tensor_model_parallel_size=2); a local run of
    a model never set it, and nothing is refused."""
    config = load_config(["actor_rollout_ref.model.path=/m"])
    assert config.actor_rollout_ref.rollout.tensor_model_parallel_size == 2
    assert local_refusals(config) == []


@pytest.mark.parametrize("override", [
    "actor_rollout_ref.actor.strategy=fsdp2", "trainer.n_gpus_per_node=4", "trainer.nnodes=2",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.model.use_remove_padding=true", "actor_rollout_ref.rollout.load_format=safetensors",
    "actor_rollout_ref.rollout.enable_prefix_caching=true", "actor_rollout_ref.rollout.name=vllm_omni",
    "ray_kwargs.ray_init.address=auto", "+actor_rollout_ref.model.override_config.attn_implementation=eager",
    "actor_rollout_ref.rollout.prompt_length=100",
])
def test_a_verl_setting_the_local_engine_cannot_honour_is_refused_by_name(override: str) -> None:
    key, value = override.lstrip("+").split("=", 1)
    (problem,) = refusals(override)
    assert problem.startswith(f"{key}={value} is a verl-engine setting (")
    assert "; the local engine " in problem and problem.endswith("Drop it, or use trainer.engine=verl")


@pytest.mark.parametrize("override", [
    # what the local engine does: one process on one device, unsharded, padded, no prefix cache
    "trainer.nnodes=1", "trainer.n_gpus_per_node=1", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.actor.fsdp_config.param_offload=false", "actor_rollout_ref.model.use_remove_padding=false",
    "actor_rollout_ref.rollout.enable_prefix_caching=false", "actor_rollout_ref.rollout.enforce_eager=true",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa", "actor_rollout_ref.model.lora_dtype=float32",
    "actor_rollout_ref.model.lora.merge=true", "+actor_rollout_ref.rollout.engine_kwargs.vllm_omni.output_mode=ar",
    "data.filter_overlong_prompts=true", "data.truncation=error", "reward.reward_manager.name=naive",
    "trainer.critic_warmup=0",
    # the log-prob passes run on the update's micro-batches
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16", "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=false",
    # a prompt budget at least data.max_prompt_length: every prompt the filter keeps fits
    "actor_rollout_ref.rollout.prompt_length=1024",
])
def test_a_verl_setting_that_says_what_the_local_engine_does_is_honoured(override: str) -> None:
    assert verl_key(override.lstrip("+").split("=", 1)[0]) is not None
    assert refusals(override) == []


def test_log_prob_sizing_is_honoured_when_it_is_the_actors() -> None:
    assert refusals("actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
                    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=20480",
                    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=20480") == []
    (problem,) = refusals("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=20480")
    assert "(honours actor_rollout_ref.actor.ppo_max_token_len_per_gpu)" in problem


def test_the_last_value_given_decides() -> None:
    assert refusals("trainer.n_gpus_per_node=4", "trainer.n_gpus_per_node=1") == []


def test_the_preflight_reports_each_refusal_with_the_others() -> None:
    from omni_trainer.config import ConfigError
    from omni_trainer.preflight import preflight

    with pytest.raises(ConfigError) as info:
        preflight(resolve_run(load_config(["actor_rollout_ref.actor.strategy=fsdp2", "trainer.n_gpus_per_node=4",
                               "actor_rollout_ref.rollout.n=0"])))
    problems = info.value.problems
    assert [p.split("=", 1)[0] for p in problems if "verl-engine setting" in p] == [
        "actor_rollout_ref.actor.strategy", "trainer.n_gpus_per_node"]
    assert "actor_rollout_ref.rollout.n=0 must be >= 1" in problems
