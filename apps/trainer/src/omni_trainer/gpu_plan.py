"""The memory plan of a local-engine run on one GPU, from its config: what ``trainer
doctor`` reports and what a GPU run prints at start (the arithmetic is
:mod:`omni_training.memory_plan`; parameters are counted on the meta device).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni_contracts import TrainingAdapter
from omni_training.memory_plan import (
    COLUMNS,
    GB,
    PLAN_NOTES,
    USABLE_FRACTION,
    Column,
    ParamCounts,
    TextShape,
    Workload,
    fits,
    format_plan,
    memory_plan,
)
from omni_training.model_loading import count_parameters

from omni_trainer.config import Config
from omni_trainer.settings_builders import lora_settings


@dataclass(frozen=True)
class Gpu:
    name: str
    total_bytes: float


def visible_gpu() -> Gpu | None:
    """CUDA device 0, or None when no CUDA device is visible."""
    import torch

    if not torch.cuda.is_available():
        return None
    return Gpu(torch.cuda.get_device_name(0), float(torch.cuda.get_device_properties(0).total_memory))


def workload(cfg: Config) -> Workload:
    """One step of the local engine: every prompt of the step in one ``generate`` call."""
    data, actor = cfg.data, cfg.actor_rollout_ref.actor
    seq = data.max_prompt_length + data.max_response_length
    micro = actor.ppo_micro_batch_size_per_gpu
    if actor.use_dynamic_bsz:  # a padded-token budget per micro-batch: rows of the longest sample
        micro = max(1, actor.ppo_max_token_len_per_gpu // seq)
    return Workload(
        prompts=data.train_batch_size, n=cfg.actor_rollout_ref.rollout.n, prompt_tokens=data.max_prompt_length,
        response_tokens=data.max_response_length, micro_batch=micro,
        lora_rank=cfg.actor_rollout_ref.model.lora_rank,
    )


def chosen_column(cfg: Config) -> Column:
    model = cfg.actor_rollout_ref.model
    lora, ckpt = model.lora_rank > 0, model.enable_gradient_checkpointing
    return next(c for c in COLUMNS if c.lora == lora and c.checkpointing == ckpt)


@dataclass(frozen=True)
class RunPlan:
    text: str  # the table, the notes and the verdict
    peak_bytes: float  # of the run's own column
    fits: bool | None  # None: no GPU to compare with


def run_plan(cfg: Config, model_path: str, hf_config: Any, adapter: TrainingAdapter, gpu: Gpu | None) -> RunPlan:
    """The four columns for this run's model and workload, its own column marked ``*``,
    and a verdict against ``gpu`` (or the plan alone without one)."""
    counts: ParamCounts = count_parameters(hf_config, adapter, lora_settings(cfg))
    work = workload(cfg)
    chosen = chosen_column(cfg)
    shape = TextShape.from_config(hf_config)
    where = f"one {gpu.name} ({gpu.total_bytes / GB:.0f} GB)" if gpu else "one GPU (none visible here)"
    table = format_plan(
        f"Memory plan: {model_path}, {where}, bf16 (* = this run)", counts, shape, work,
        gpu.total_bytes if gpu else None, chosen=chosen,
    )
    peak = memory_plan(counts, shape, work, lora=chosen.lora, checkpointing=chosen.checkpointing)["peak"]
    lines = [table, PLAN_NOTES]
    verdict: bool | None = None
    if gpu is None:
        lines.append(f"this run ({chosen.name}) would need about {peak / GB:.1f} GB on one GPU; no GPU is visible here")
    else:
        verdict = fits(peak, gpu.total_bytes)
        usable = gpu.total_bytes * USABLE_FRACTION
        lines.append(
            f"this run ({chosen.name}) needs about {peak / GB:.1f} GB of {usable / GB:.1f} GB usable on {gpu.name}: "
            + ("fits" if verdict else "does not fit; " + _advice(cfg, chosen))
        )
    return RunPlan("\n".join(lines), peak, verdict)


def _advice(cfg: Config, chosen: Column) -> str:
    tips = []
    if not chosen.checkpointing:
        tips.append("actor_rollout_ref.model.enable_gradient_checkpointing=true")
    if not chosen.lora:
        tips.append("LoRA (actor_rollout_ref.model.lora_rank=16)")
    tips.append("a smaller actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu, data.train_batch_size or "
                "data.max_response_length")
    if cfg.trainer.engine == "local":
        tips.append("or trainer.engine=verl across several GPUs")
    return "try " + ", ".join(tips)
