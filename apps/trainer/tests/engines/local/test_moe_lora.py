"""LoRA on a MoE's fused experts (PEFT's ``target_parameters``, verl-omni's DPO recipe), on the
tiny Qwen3-Omni whose thinker has 4 experts per layer."""

from __future__ import annotations

import torch

from omni_trainer.config import load_config
from omni_trainer.settings_builders import lora_settings
from omni_trainer.resolved import resolve_run

EXPERTS = ["gate_up_proj", "down_proj"]


def test_the_experts_fused_parameters_get_lora_and_train() -> None:
    from transformers import AutoConfig

    from omni_contracts import resolve_training_adapter
    from omni_qwen3.tiny import build_tiny_qwen3_omni
    from omni_training.actor import Actor
    from omni_training.model_loading import load_policy, lora_parameter_count
    from omni_training.policy_loss import PolicyLossConfig
    from omni_training.settings import NO_LORA, ActorSettings, OptimizerSettings

    path = str(build_tiny_qwen3_omni())
    config = load_config([f"actor_rollout_ref.model.path={path}", "actor_rollout_ref.model.lora_rank=4",
                          "actor_rollout_ref.model.target_modules=[q_proj,v_proj]",
                          f"actor_rollout_ref.model.target_parameters=[{','.join(EXPERTS)}]"])
    lora = lora_settings(config)
    assert lora.target_parameters == tuple(EXPERTS)
    adapter = resolve_training_adapter(AutoConfig.from_pretrained(path), "thinker")
    torch.manual_seed(0)
    settings = ActorSettings(
        loss_mode="vanilla", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"), gradient_checkpointing=False
    )
    actor = Actor.from_pretrained(
        path, adapter, settings=settings, lora=lora, optim=OptimizerSettings(lr=1e-2, weight_decay=0.0)
    )
    trainable = {n: p for n, p in actor.model.named_parameters() if p.requires_grad}
    experts = {n for n in trainable if ".mlp.experts." in n}
    assert experts and all("lora_" in n for n in trainable)
    base, _ = load_policy(path, adapter, NO_LORA, dtype="float32", device="cpu", gradient_checkpointing=False)
    assert sum(p.numel() for p in trainable.values()) == lora_parameter_count(base, adapter, lora)  # the plan's count
    from omni_training.batching import MicroBatch, collate

    ids = torch.tensor([[5, 6, 7, 8]])
    inputs, responses, mask = collate([{"input_ids": ids, "attention_mask": torch.ones_like(ids)}], [[9, 10, 11]],
                                      [[1, 1, 1]], pad_token_id=0)
    before = {n: trainable[n].detach().clone() for n in experts}

    def objective(batch: MicroBatch, log_probs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        return -(log_probs * batch.response_mask).sum(), {}

    for _ in range(2):  # LoRA's B starts at 0: the first step moves B, the second A too
        actor.update_objective([MicroBatch(inputs, responses, mask)], objective)
    assert all(not torch.equal(before[n], trainable[n]) for n in experts)


def test_verl_gets_the_target_parameters() -> None:
    from omni_trainer.engines.verl.translate import to_verl_config

    config = load_config(["trainer.engine=verl", "actor_rollout_ref.model.path=/m", "data.train_files=[/d.parquet]",
                          "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
                          f"actor_rollout_ref.model.target_parameters=[{','.join(EXPERTS)}]"])
    verl = to_verl_config(config, lora_target_modules=["q_proj"], lora_exclude_modules=None)
    assert list(verl.actor_rollout_ref.model.target_parameters) == EXPERTS


def test_dropout_with_parameter_lora_is_refused_before_anything_loads() -> None:
    """PEFT raises deep in model loading ("ParamWrapper does not work with lora_dropout != 0");
    the pre-flight says it first, with the fix."""
    import pytest

    from omni_trainer.config import ConfigError
    from omni_trainer.preflight import preflight

    with pytest.raises(ConfigError, match="takes no dropout; set actor_rollout_ref.model.lora_dropout=0"):
        preflight(resolve_run(load_config([f"actor_rollout_ref.model.target_parameters=[{','.join(EXPERTS)}]",
                               "actor_rollout_ref.model.lora_dropout=0.05"])))
