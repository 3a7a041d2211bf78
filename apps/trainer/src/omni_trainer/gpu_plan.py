"""Memory plans from a run's config, parameters counted on the meta device.

- The local engine on one GPU: what ``trainer doctor`` reports and what a GPU run prints at
  start (the arithmetic is :mod:`omni_training.memory_plan`).
- The verl engine's rollout: vLLM-Omni pre-allocates ``gpu_memory_utilization`` x the GPU
  for the policy stage's weights and its KV cache; weights of ``params x 2 B /
  tensor_model_parallel_size`` per GPU (bf16, verl's rollout dtype) that leave no room for
  one full sequence's KV cache make vLLM refuse to start (:func:`rollout_memory_problem`,
  run by the pre-flight). The GPU is the visible one, else :data:`ASSUMED_GPU`.
"""

from __future__ import annotations

import dataclasses
import math
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
from omni_trainer.resolved import ResolvedRun
from omni_trainer.settings_builders import lora_settings


@dataclass(frozen=True)
class Gpu:
    name: str
    total_bytes: float


ASSUMED_GPU = Gpu("an 80 GB GPU, assumed: none is visible here", 85.0e9)
"""What the rollout check assumes without a visible GPU: an H100/H800 80GB, whose memory
torch reports as 85.0e9 bytes (79.2 GiB)."""
ROLLOUT_DTYPE_BYTES = 2
"""Bytes per rollout weight and KV value: verl's ``rollout.dtype`` default, bfloat16."""
GIB = 2**30


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


def run_plan(
    cfg: Config, model_path: str, hf_config: Any, adapter: TrainingAdapter, gpu: Gpu | None, scale_out: str | None = None,
) -> RunPlan:
    """The four columns for this run's model and workload, its own column marked ``*``,
    and a verdict against ``gpu`` (or the plan alone without one). ``scale_out``: the engine's
    last tip for a run that does not fit (:attr:`omni_trainer.engines.Engine.scale_out`)."""
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
            + ("fits" if verdict else "does not fit; " + _advice(chosen, scale_out))
        )
    return RunPlan("\n".join(lines), peak, verdict)


def _advice(chosen: Column, scale_out: str | None) -> str:
    tips = []
    if not chosen.checkpointing:
        tips.append("actor_rollout_ref.model.enable_gradient_checkpointing=true")
    if not chosen.lora:
        tips.append("LoRA (actor_rollout_ref.model.lora_rank=16)")
    tips.append("a smaller actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu, data.train_batch_size or "
                "data.max_response_length")
    if scale_out:
        tips.append(f"or {scale_out}")
    return "try " + ", ".join(tips)


def model_for_plan(run: ResolvedRun) -> tuple[Any, TrainingAdapter] | None:
    """The run's checkpoint as a transformers config, and its training adapter; None when
    either cannot be had (the pre-flight's model check reports why)."""
    from transformers import AutoConfig

    from omni_contracts import OmniContractError

    if run.model is None or run.model.config is None:
        return None
    try:
        return AutoConfig.from_pretrained(run.model.path), run.training_adapter()
    except (OSError, ValueError, OmniContractError):
        return None


def rollout_memory_problem(cfg: Config, hf_config: Any, adapter: TrainingAdapter, gpu: Gpu | None) -> str | None:
    """verl engine: why the rollout's policy stage cannot start on ``gpu`` (None when it can).

    Its weights per GPU plus the KV cache of one full sequence (prompt + response: vLLM
    admits no request it cannot hold) must fit in ``gpu_memory_utilization x`` the GPU.
    Necessary, not sufficient: vLLM's activation profile and CUDA graphs take their share
    too (``uv run trainer plan-memory`` sizes those). The policy stage is taken to hold the
    whole share, as it does alone on its GPUs (``thinker_only``); where other pipeline stages
    share them, its part is smaller and the check is optimistic.

    Raises:
        ValueError: the config lacks a size the check needs (the pre-flight warns instead).
    """
    from omni_rollout.memory_planner import MAX_UTILIZATION, kv_bytes_per_token, model_shape_from_mapping

    rollout = cfg.actor_rollout_ref.rollout
    gpu = gpu or ASSUMED_GPU
    params = count_parameters(hf_config, adapter, lora_settings(cfg)).total
    shape = dataclasses.replace(model_shape_from_mapping(hf_config.to_dict(), params),
                                weight_bytes=ROLLOUT_DTYPE_BYTES, kv_bytes=ROLLOUT_DTYPE_BYTES)
    sequence = cfg.data.max_prompt_length + cfg.data.max_response_length
    share = rollout.gpu_memory_utilization * gpu.total_bytes

    def weights(tp: int) -> float:
        return params * ROLLOUT_DTYPE_BYTES / tp

    def needed(tp: int) -> float:
        return weights(tp) + kv_bytes_per_token(shape, tp) * sequence

    tp = rollout.tensor_model_parallel_size
    if needed(tp) < share:
        return None
    key = "actor_rollout_ref.rollout"
    kv = needed(tp) - weights(tp)
    what = (f"{key}: the rollout's weights take {weights(tp) / GIB:.1f} GiB per GPU ({params / 1e9:.2f}B parameters "
            f"in bf16 / tensor_model_parallel_size={tp})"
            + (f", and one {sequence}-token sequence's KV cache {kv / GIB:.2f} GiB more" if weights(tp) < share else "")
            + f"; their share of the GPU is gpu_memory_utilization={rollout.gpu_memory_utilization} x "
            f"{gpu.total_bytes / GIB:.1f} GiB = {share / GIB:.1f} GiB ({gpu.name}): no room for a KV cache, and vLLM "
            "refuses to start.")
    gpus = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    fixes = []
    larger = [t for t in (2, 4, 8, 16) if t > tp and gpus % t == 0 and needed(t) < share]
    if larger:
        fixes.append(f"set {key}.tensor_model_parallel_size={larger[0]} ({weights(larger[0]) / GIB:.1f} GiB of "
                     "weights per GPU)")
    lowest = math.floor(needed(tp) / gpu.total_bytes / 0.05 + 1) * 0.05  # the next multiple of 0.05 above
    if round(lowest, 2) <= MAX_UTILIZATION:
        fixes.append(f"raise {key}.gpu_memory_utilization to {lowest:.2f} or more, with "
                     "actor_rollout_ref.actor.fsdp_config.param_offload=true and optimizer_offload=true (the actor "
                     "leaves the GPU while vLLM holds it)")
    if not fixes:
        fixes.append(f"more GPUs (trainer.n_gpus_per_node) and a larger {key}.tensor_model_parallel_size")
    return what + " Fix: " + "; or ".join(fixes) + ". `uv run trainer plan-memory` sizes the rest."
