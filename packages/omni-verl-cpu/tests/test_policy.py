"""What the CPU rollout serves reaches its servers through the runtime env, whole, and a server
started without it says where it comes from."""

from __future__ import annotations

import pytest

from omni_verl_cpu.policy import POLICY_ENV, CpuPolicy


def test_the_policy_round_trips_through_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = CpuPolicy(
        model_path="/m", stage="talker", adapter_options={"freeze_vision_tower": False},
        pipeline_name="qwen3_omni_moe", pipeline_mode="thinker_talker", max_spoken_tokens=12,
    )
    monkeypatch.setenv(POLICY_ENV, policy.to_env())
    assert CpuPolicy.from_env() == policy


def test_a_server_without_the_policy_names_the_variable_and_its_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(POLICY_ENV, raising=False)
    with pytest.raises(RuntimeError, match=f"{POLICY_ENV} is not set in this process.*trainer.device=cpu"):
        CpuPolicy.from_env()


def test_the_policy_resolves_the_adapters_and_the_processor_the_actor_uses(tmp_path: object) -> None:
    """The tiny Qwen3-Omni's training adapter with the policy's options, the rollout adapter
    checked for its mode, and the adapter's own processor (the actor's features)."""
    from transformers import AutoConfig

    from omni_contracts import resolve_training_adapter
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    path = str(build_tiny_qwen3_omni())
    hf_config = AutoConfig.from_pretrained(path)
    policy = CpuPolicy(model_path=path, adapter_options={"freeze_vision_tower": False, "freeze_audio_tower": True})
    adapter = policy.training_adapter(hf_config)
    assert type(adapter) is type(resolve_training_adapter(hf_config, "thinker", policy.adapter_options))
    assert policy.rollout_adapter().policy_stage_id("thinker_only") == 0
    processor = policy.processor(hf_config)
    assert processor.tokenizer is not None and type(processor).__name__ == type(
        adapter.configure_processor(path, hf_config)).__name__
    with pytest.raises(Exception, match="talker_only|mode"):
        CpuPolicy(model_path=path, pipeline_mode="talker_only").rollout_adapter()
