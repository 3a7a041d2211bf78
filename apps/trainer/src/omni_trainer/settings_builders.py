"""The config's sections -> the packages' settings objects (flat, typed arguments)."""

from __future__ import annotations

import dataclasses
from typing import Any

from omni_rewards import RewardManagerConfig
from omni_rewards.reward_file import JUDGE_PRELOAD
from omni_rollout.chat_server import ChatServerSettings
from omni_rollout.sampling import SamplingSettings
from omni_training.distillation import DistillationSettings
from omni_training.policy_loss import PolicyLossConfig
from omni_training.rollout_correction import CorrectionSettings
from omni_training.settings import ActorSettings, LoraSettings, OptimizerSettings

from omni_trainer.config import Config


def adapter_options(cfg: Config) -> dict[str, Any]:
    """The options a training adapter may declare (``TrainingAdapter.options``)."""
    model = cfg.actor_rollout_ref.model
    return {"freeze_vision_tower": model.freeze_vision_tower, "freeze_audio_tower": model.freeze_audio_tower}


def local_device(cfg: Config) -> str:
    """``trainer.device`` for the local engine: ``auto`` is ``cuda`` when a CUDA device is
    visible, else ``cpu`` (the pre-flight refuses ``cuda`` without one, and ``npu``)."""
    device = cfg.trainer.device
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def model_dtype(cfg: Config, device: str) -> str:
    """``actor.dtype``: ``auto`` is ``bfloat16`` on a GPU and ``float32`` on the CPU."""
    dtype = cfg.actor_rollout_ref.actor.dtype
    if dtype == "auto":
        return "float32" if device == "cpu" else "bfloat16"
    return dtype


def actor_settings(
    cfg: Config, distillation: DistillationSettings | None = None, *, device: str | None = None
) -> ActorSettings:
    """``device=None``: resolved from ``trainer.device`` (:func:`local_device`)."""
    actor = cfg.actor_rollout_ref.actor
    device = device or local_device(cfg)
    correction = correction_settings(cfg)
    return ActorSettings(
        loss_mode=actor.policy_loss.loss_mode,
        policy_loss=PolicyLossConfig(
            clip_ratio=actor.clip_ratio, clip_ratio_low=actor.clip_ratio_low, clip_ratio_high=actor.clip_ratio_high,
            clip_ratio_c=actor.clip_ratio_c, loss_agg_mode=actor.loss_agg_mode,
            loss_scale_factor=actor.loss_scale_factor or cfg.data.max_response_length,
        ),
        use_kl_loss=actor.use_kl_loss, kl_loss_coef=actor.kl_loss_coef, kl_loss_type=actor.kl_loss_type,
        entropy_coeff=actor.entropy_coeff, temperature=cfg.actor_rollout_ref.rollout.temperature or 1.0,
        dtype=model_dtype(cfg, device),  # type: ignore[arg-type]
        device=device, gradient_checkpointing=cfg.actor_rollout_ref.model.enable_gradient_checkpointing,
        distillation=distillation,
        bypass_correction=correction if correction.bypass_mode else None,
    )


def correction_settings(cfg: Config) -> CorrectionSettings:
    """``algorithm.rollout_correction`` as omni-training's settings (checked on creation)."""
    return CorrectionSettings(**dataclasses.asdict(cfg.algorithm.rollout_correction))


def lora_settings(cfg: Config) -> LoraSettings:
    model = cfg.actor_rollout_ref.model
    return LoraSettings(
        rank=model.lora_rank, alpha=model.lora_alpha, dropout=model.lora_dropout,
        target_modules=tuple(model.target_modules) if model.target_modules else None,
        exclude_modules=model.exclude_modules,
        target_parameters=tuple(model.target_parameters) if model.target_parameters else None,
    )


def warmup_steps(cfg: Config, total_steps: int | None) -> int:
    """``optim.lr_warmup_steps``, or with verl's -1 its ratio of the training steps (as verl rounds it)."""
    optim = cfg.actor_rollout_ref.actor.optim
    if optim.lr_warmup_steps >= 0:
        return optim.lr_warmup_steps
    return int(optim.lr_warmup_steps_ratio * (total_steps or 0))


def optim_settings(cfg: Config, total_steps: int | None) -> OptimizerSettings:
    optim = cfg.actor_rollout_ref.actor.optim
    return OptimizerSettings(
        lr=optim.lr, weight_decay=optim.weight_decay, warmup_steps=warmup_steps(cfg, total_steps),
        schedule=optim.lr_scheduler_type,  # type: ignore[arg-type]
        total_steps=total_steps, min_lr_ratio=optim.min_lr_ratio, grad_clip=cfg.actor_rollout_ref.actor.grad_clip,
    )


def rollout_seed(seed: int, step: int) -> int:
    """The sampling seed of a step. The engine seeds prompt ``i`` with ``seed + i``, so steps
    are spaced far apart: no prompt of one step replays another step's random stream."""
    return (seed * 100_003 + step) * 1_000_003


def sampling_settings(cfg: Config, step: int) -> SamplingSettings:
    rollout = cfg.actor_rollout_ref.rollout
    return SamplingSettings(
        n=rollout.n, temperature=rollout.temperature, top_p=rollout.top_p, top_k=rollout.top_k,
        max_new_tokens=cfg.data.max_response_length, seed=rollout_seed(cfg.trainer.seed, step),
    )


def validation_sampling(cfg: Config) -> SamplingSettings:
    """``rollout.val_kwargs`` (verl's): greedy unless ``do_sample``; the same seed at every
    validation, so two validations differ only by the policy."""
    val = cfg.actor_rollout_ref.rollout.val_kwargs
    return SamplingSettings(
        n=val.n, temperature=val.temperature if val.do_sample else 0.0, top_p=val.top_p, top_k=val.top_k,
        max_new_tokens=cfg.data.max_response_length, seed=rollout_seed(cfg.trainer.seed, 0) + 7,
    )


def reward_manager_config(cfg: Config) -> RewardManagerConfig:
    reward = cfg.reward
    return RewardManagerConfig(
        num_workers=reward.num_workers, timeout_s=reward.timeout_s,
        on_unknown_data_source=reward.on_unknown_data_source,  # type: ignore[arg-type]
        preload=JUDGE_PRELOAD if reward.reward_model.enable else (),
    )


def distillation_settings(config: Config) -> DistillationSettings | None:
    """``distillation.*`` as omni-training's ``DistillationSettings`` (None when off).

    Raises:
        DistillationConfigError: a value omni-training refuses.
    """
    if not config.distillation.enabled:
        return None
    loss = config.distillation.distillation_loss
    return DistillationSettings(
        loss_mode=loss.loss_mode, topk=loss.topk, use_task_rewards=loss.use_task_rewards,
        distillation_loss_coef=loss.distillation_loss_coef, loss_max_clamp=loss.loss_max_clamp,
        log_prob_min_clamp=loss.log_prob_min_clamp, use_policy_gradient=loss.use_policy_gradient,
        clip_ratio=loss.clip_ratio, clip_ratio_low=loss.clip_ratio_low, clip_ratio_high=loss.clip_ratio_high,
    )


JUDGE_DEFAULTS = {"max_num_seqs": 16, "prompt_length": 2048, "response_length": 2048, "temperature": 1.0, "top_p": 1.0,
                  "top_k": -1}
"""The local judge's values of ``reward.reward_model.rollout``'s unset keys: verl's, but 16 requests
at once (verl's 1024 is a vLLM server's)."""


def judge_settings(cfg: Config, device: str) -> ChatServerSettings:
    """The local engine's judge (``reward.reward_model``): served on the policy's device."""
    judge = cfg.reward.reward_model
    assert judge.model_path is not None  # the pre-flight refuses an enabled judge without one
    rollout = judge.rollout
    given = {name: getattr(rollout, name) for name in JUDGE_DEFAULTS if getattr(rollout, name) is not None}
    values = {**JUDGE_DEFAULTS, **given}
    if rollout.do_sample is False:
        values["temperature"] = 0.0
    return ChatServerSettings(
        model_path=judge.model_path, device=device,
        dtype=rollout.dtype or ("float32" if device == "cpu" else "bfloat16"), **values)
