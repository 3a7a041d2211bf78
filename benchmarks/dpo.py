"""Offline DPO: our step (``algorithm.sample_source=offline``) vs TRL's DPOTrainer on the tiny thinker.

    UV_PROJECT_ENVIRONMENT=/tmp/benchvenv uv sync --locked --group bench
    UV_PROJECT_ENVIRONMENT=/tmp/benchvenv uv run --locked --group bench python benchmarks/dpo.py --check
    UV_PROJECT_ENVIRONMENT=/tmp/benchvenv uv run --locked --group bench python benchmarks/dpo.py
    uv run python benchmarks/dpo.py --skip-trl   # our side alone, no TRL needed

Both sides train the same tiny Qwen3-Omni thinker (random weights, built offline) from one
checkpoint, fp32 on the CPU, with LoRA on the same modules, the same AdamW (lr, betas, eps,
weight decay; constant schedule, no warm-up), the same gradient clipping, DPO's sigmoid loss
at the same beta, the same pairs per optimizer step and pairs per forward/backward
(gradient accumulation), and the same token ids. The mapping of each setting is written
beside it in ``our_overrides`` and ``trl_config``.

``--check``, the whole-step differential: one optimizer step on each side from identical
weights, LoRA A and B included (ours drawn, then copied into TRL's model by name; B is drawn
non-zero, since PEFT's zero B would leave A without a gradient in the first step), on the
same text pairs. Asserted within ``--tol`` (1e-4): the step's loss, the pre-clip gradient
norm, every element of every trainable parameter's (clipped) gradient and every updated
trainable parameter; TRL's logged ``rewards/*`` and ``logps/*`` are compared too. The raw
numbers go to ``outputs/benchmarks/dpo-check.json``.

The default, the speed benchmark: steps/s over ``--steps`` steps on text pairs after one
warm-up step per side, timed as ``benchmarks/trainer.py`` times (a timestamp at the end of
every optimizer step: ours after ``train_step`` returns, TRL's in
``TrainerCallback.on_step_end``; data loading included on both; per-step logging off on both).
Each pair is used once (ours: ``sampler_kwargs.replacement=false``; TRL:
``train_sampling_strategy="sequential"``), so both sides see the same pairs in the same steps
and both run one reference forward per pair (TRL's default ``precompute_ref_log_probs=False``
runs it inside the step; ours computes it on a pair's first use, inside the step, and caches
it). The tokens each side actually fed to its model are counted per step and asserted equal.
Then our side alone on image pairs and on audio pairs (the built-in preference task's), with
the reason TRL cannot train them (``TRL_MULTIMODAL_GAPS``, each backed by what
``probe_trl_media`` observes TRL do with two such pairs, printed and saved). The raw numbers
go to ``outputs/benchmarks/dpo.json``.

Where the time goes (cProfile, 7 steps each): the text decoder costs the two sides alike
(about 0.35 s per 28 forwards); TRL's fused LM head, on a device without Triton (this CPU),
projects and scores every position of every row, prompt and padding included, with entropy,
mean logit and top-1 statistics, in the policy and the reference forward: about two thirds of
its step. Ours projects only the response positions (``logits_to_keep``). On a Triton GPU
TRL's head scores only completion positions, so this ratio is a CPU one.

What differs between the two trainers and is neutralised, each side's choice:

- Token ids. TRL tokenizes ``prompt + [chosen message]`` with the chat template, so its
  completion is the answer plus ``<|im_end|>`` and ``\\n`` (a plain-text dataset gets the EOS,
  also ``<|im_end|>``, appended instead); ours scores the answer's own tokens, as verl-omni
  labels them. TRL is given our token ids: its dataset is replaced, after ``__init__``, by
  ``prompt_ids`` / ``chosen_ids`` / ``rejected_ids`` columns, which its collator takes as they
  are. The difference of TRL's own tokenization is recorded in the JSON.
- The logit mask (``--check`` only). Our actor scores responses under the rollout's masked
  distribution (media placeholders excluded from the softmax, ``omni_training.logit_mask``);
  TRL's fused LM head uses the full vocabulary. ``--check`` runs ours without the mask and
  also reports the loss with it on. The speed benchmark keeps it (our real step; its cost
  is one ``masked_fill`` of the response logits).
- The MoE router's auxiliary loss: TRL adds ``router_aux_loss_coef`` (0.001 in the thinker's
  config) x the load-balancing loss; ours adds none, so ``router_aux_loss_coef=0.0``.
- TRL's fused LM head reaches the decoder through ``model.base_model``; as in
  ``benchmarks/trainer.py`` the thinker instance gets ``base_model_prefix = "model"``.

Torch runs one thread by default (``--threads``; see ``benchmarks/trainer.py`` for why).
Not a CI gate.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import trainer as grpo_benchmark  # noqa: E402
from trainer import load_trl_thinker, questions, trainable_parameters, version  # noqa: E402

MEDIA_MODALITIES = ("image", "audio")
TRL_MULTIMODAL_GAPS = {
    "image": (
        "TRL's DPOTrainer takes pictures through its vision path (an `images` column, "
        "DataCollatorForVisionPreference, the checkpoint's Qwen3OmniMoeProcessor) and trains without an error, but "
        "its loss forward runs the fused LM head on `model.base_model`, the thinker's text decoder, which ignores "
        "pixel_values: the picture never reaches the loss (measured by probe_trl_media: its policy log-probs are "
        "identical with the real picture and with random pixels)."
    ),
    "audio": (
        "TRL's DPOTrainer has no audio path: its vision detection and collator know `image`/`images` only, so an "
        "`audios` column is never given to the processor; with an audio part in the prompt, preparing the dataset "
        "fails in the processor's placeholder expansion (no audio to expand it for), and without one the pair is "
        "text alone."
    ),
}
NEUTRALISED = [
    "token ids: TRL is given our prompt/chosen/rejected token ids (its own chat-template tokenization appends "
    "<|im_end|> and \\n to every completion)",
    "router auxiliary loss: TRL router_aux_loss_coef=0.0 (the thinker's config has 0.001; ours adds none)",
    "logit mask (--check only): ours without the media-placeholder mask; TRL's fused head has none",
]


@dataclass(frozen=True)
class Setup:
    """What both sides share."""

    pairs_per_step: int = 16  # data.train_batch_size = actor.ppo_mini_batch_size (one optimizer step)
    micro_pairs: int = 8  # pairs per forward/backward: 2x rows (chosen and rejected)
    steps: int = 24  # timed steps, after one warm-up step (8 gave 6.7-7.9 steps/s for ours in two runs)
    lora_rank: int = 16
    lora_alpha: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    beta: float = 0.1
    max_prompt_length: int = 256
    seed: int = 0
    threads: int = 1
    lora_b_std: float = 0.0  # > 0: LoRA B drawn N(0, std) instead of PEFT's zeros (--check)

    @property
    def total_steps(self) -> int:
        return self.steps + 1

    @property
    def accumulation(self) -> int:
        return self.pairs_per_step // self.micro_pairs


@dataclass
class Result(grpo_benchmark.Result):
    """``benchmarks/trainer.py``'s timing record, with each timed step's loss in place of its
    reward: ``step_tokens`` are the tokens fed to the policy forward."""

    step_completion_tokens: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)  # each timed step's loss (before its update)

    def raw(self) -> dict[str, Any]:
        raw = {k: v for k, v in super().raw().items() if k != "rewards"}
        return {**raw, "step_completion_tokens": self.step_completion_tokens, "losses": self.losses}


# --- data -----------------------------------------------------------------------------------------


def text_pairs(count: int, seed: int) -> list[dict[str, Any]]:
    """The built-in preference task's pairs, text only: a question, a number preferred to an
    evasion (:mod:`omni_data.builtin`)."""
    from omni_data.builtin import EVASIONS
    from omni_data.builtin import ANY_NUMBER

    rng = random.Random(seed)
    pairs = []
    for row in questions(count, seed=seed):
        truth = row["ground_truth"]
        number = truth if truth != ANY_NUMBER else str(rng.randint(1, 9))
        pairs.append({"messages": row["messages"], "chosen": f"{number}.", "rejected": rng.choice(EVASIONS),
                      "index": row["index"]})
    return pairs


def write_text_pairs(pairs: Sequence[dict[str, Any]], path: Path) -> Path:
    from omni_data import preference_row, write_preference_parquet

    return write_preference_parquet([
        preference_row(data_source="omni_rl/bench_text_pairs", messages=p["messages"], chosen=p["chosen"],
                       rejected=p["rejected"], modality="text", extra_info={"index": p["index"]})
        for p in pairs
    ], path)


def write_media_pairs(modality: str, count: int, seed: int, workdir: Path) -> Path:
    """``count`` of the built-in preference task's ``modality`` pairs (a picture or a tone each)."""
    from omni_data import write_preference_parquet
    from omni_data.builtin import MODALITIES, builtin_pairs

    rows = builtin_pairs(count * len(MODALITIES), seed, workdir / f"{modality}-media", split="train")
    chosen = [row for row in rows if row["extra_info"]["modality"] == modality][:count]
    assert len(chosen) == count
    return write_preference_parquet(chosen, workdir / f"{modality}.parquet")


# --- ours -----------------------------------------------------------------------------------------


def our_overrides(setup: Setup, model_path: str, train_file: Path, run_dir: Path) -> list[str]:
    from omni_qwen3.training_adapter import LORA_TARGET_MODULES

    return [
        f"actor_rollout_ref.model.path={model_path}",
        "algorithm.sample_source=offline",
        "algorithm.trainer_type=direct_preference",
        "algorithm.paired_preference=true",
        f"data.train_files=[{train_file}]",
        f"data.train_batch_size={setup.pairs_per_step}",
        f"data.max_prompt_length={setup.max_prompt_length}",
        "data.shuffle=false",
        # Every pair once, in file order (TRL: train_sampling_strategy="sequential").
        f"+data.train_sampler.sampler_kwargs={{batch_size:{setup.pairs_per_step},drop_last:true,replacement:false}}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={setup.pairs_per_step}",  # one optimizer step per batch
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={2 * setup.micro_pairs}",  # rows: chosen + rejected
        "actor_rollout_ref.actor.omni_loss.loss_type=sigmoid",  # TRL loss_type=["sigmoid"]
        f"actor_rollout_ref.actor.omni_loss.beta={setup.beta}",
        "actor_rollout_ref.actor.omni_loss.label_smoothing=0.0",
        "actor_rollout_ref.actor.omni_loss.average_log_prob=false",  # summed log-probs, as TRL's sigmoid
        "actor_rollout_ref.rollout.temperature=1.0",  # the actor divides logits by it; TRL's head by 1.0
        f"actor_rollout_ref.model.lora_rank={setup.lora_rank}",
        f"actor_rollout_ref.model.lora_alpha={setup.lora_alpha}",
        "actor_rollout_ref.model.lora_dropout=0.0",
        f"actor_rollout_ref.model.target_modules=[{','.join(LORA_TARGET_MODULES)}]",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        f"actor_rollout_ref.actor.grad_clip={setup.grad_clip}",
        "actor_rollout_ref.actor.dtype=float32",
        "trainer.device=cpu",
        f"actor_rollout_ref.actor.optim.lr={setup.lr}",
        f"actor_rollout_ref.actor.optim.weight_decay={setup.weight_decay}",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=0",
        "actor_rollout_ref.actor.optim.lr_scheduler_type=constant",
        f"trainer.total_training_steps={setup.total_steps}",
        f"trainer.seed={setup.seed}",
        f"data.seed={setup.seed}",
        "trainer.val_before_train=false",
        "trainer.test_freq=0",
        f"trainer.default_local_dir={run_dir}",
        "trainer.resume_mode=disable",
    ]


def build_ours(setup: Setup, model_path: str, train_file: Path, run_dir: Path, *, logit_mask: bool = True) -> Any:
    """Our trainer, set up (weights loaded); ``logit_mask=False``: the actor's logit mask is not
    installed (see the module docstring)."""
    from unittest import mock

    from omni_trainer.config import load_config
    from omni_trainer.engines.local.trainer import LocalTrainer
    from omni_trainer.resolved import resolve_run
    from omni_training.actor import Actor

    trainer = LocalTrainer(resolve_run(load_config(our_overrides(setup, model_path, train_file, run_dir))))
    off = mock.patch.object(Actor, "mask_logits", lambda self, mask: None) if not logit_mask else contextlib.nullcontext()
    with off:
        trainer.setup()
    if setup.lora_b_std > 0:
        import torch

        generator = torch.Generator().manual_seed(setup.seed + 1)
        with torch.no_grad():
            for name, parameter in trainer.actor.model.named_parameters():
                if ".lora_B." in name:
                    parameter.copy_(torch.randn(parameter.shape, generator=generator) * setup.lora_b_std)
    return trainer


def trainable_state(model: Any, rename: bool = False) -> dict[str, Any]:
    """Trainable parameters by name, cloned; ``rename``: our policy's names (``thinker.`` inside
    the PEFT wrapper) as TRL's thinker has them."""
    return {(trl_name(n) if rename else n): p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def trl_name(ours: str) -> str:
    return ours.replace("base_model.model.thinker.", "base_model.model.", 1)


def pair_ids(pair: Any) -> dict[str, list[int]]:
    return {"prompt_ids": pair.prompt.inputs["input_ids"][0].tolist(), "chosen_ids": list(pair.chosen),
            "rejected_ids": list(pair.rejected)}


def pair_tokens(pairs: Sequence[Any]) -> tuple[int, int]:
    """(all tokens, completion tokens) the policy forward sees for ``pairs``: prompt + chosen
    and prompt + rejected rows, padding excluded."""
    ids = [pair_ids(p) for p in pairs]
    completion = sum(len(i["chosen_ids"]) + len(i["rejected_ids"]) for i in ids)
    return completion + sum(2 * len(i["prompt_ids"]) for i in ids), completion


def run_ours(
    setup: Setup, model_path: str, train_file: Path, workdir: Path, name: str = "omni-rl local engine",
) -> tuple[Result, list[dict[str, list[int]]], dict[str, Any]]:
    """Our timed run; also every pair's token ids and the LoRA init, under TRL's names (for TRL's side)."""
    trainer = build_ours(setup, model_path, train_file, workdir / name.replace(" ", "-").replace(",", ""))
    # Every pair encoded up front, as TRL's __init__ tokenizes its dataset (module docstring).
    ids = [pair_ids(trainer.train_rows[i]) for i in range(len(trainer.train_rows))]
    lora = trainable_state(trainer.actor.model, rename=True)
    result = Result(name, trainable=trainable_parameters(trainer.actor.model))
    trainer.task.start()
    try:
        for step, batch in trainer.batches(0):
            metrics = trainer.train_step(step, batch)
            result.step_ends.append(time.perf_counter())
            if step > 1:  # the first step is the warm-up
                tokens, completion = pair_tokens(batch)
                result.step_tokens.append(tokens)
                result.step_completion_tokens.append(completion)
                result.losses.append(metrics["loss"])
    finally:
        trainer.task.close()
    return result, ids, lora


# --- TRL ------------------------------------------------------------------------------------------


def trl_config(setup: Setup, output_dir: Path, *, check: bool = False) -> Any:
    from trl import DPOConfig

    return DPOConfig(
        output_dir=str(output_dir),
        use_cpu=True, bf16=False, fp16=False,  # actor.dtype=float32, trainer.device=cpu
        gradient_checkpointing=False,  # model.enable_gradient_checkpointing=false
        max_steps=setup.total_steps,  # trainer.total_training_steps
        per_device_train_batch_size=setup.micro_pairs,  # actor.ppo_micro_batch_size_per_gpu / 2 (TRL: pairs)
        gradient_accumulation_steps=setup.accumulation,  # data.train_batch_size = ppo_mini_batch_size pairs per step
        train_sampling_strategy="sequential",  # sampler_kwargs.replacement=false, data.shuffle=false
        loss_type=["sigmoid"], beta=setup.beta, label_smoothing=0.0,  # omni_loss.loss_type/beta/label_smoothing
        precompute_ref_log_probs=False,  # ours: the reference forward on a pair's first use, in the step
        max_length=None,  # no truncation (ours: data.max_prompt_length filters, answers are never cut)
        router_aux_loss_coef=0.0,  # ours adds no MoE load-balancing loss (module docstring)
        disable_dropout=True,  # the tiny thinker has none; LoRA dropout 0 on both
        learning_rate=setup.lr, lr_scheduler_type="constant", warmup_steps=0,  # actor.optim.*
        optim="adamw_torch", weight_decay=setup.weight_decay, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
        max_grad_norm=setup.grad_clip,  # actor.grad_clip
        seed=setup.seed,
        logging_strategy="no", report_to="none", save_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0,
    )


@dataclass
class TrlRecord:
    """What the TRL side saw, per optimizer step (filled by its trainer subclass and callback)."""

    step_ends: list[float] = field(default_factory=list)
    micro_losses: list[list[float]] = field(default_factory=lambda: [[]])
    micro_tokens: list[list[tuple[int, int]]] = field(default_factory=lambda: [[]])
    grad_norms: list[float] = field(default_factory=list)
    grads: dict[str, Any] = field(default_factory=dict)  # the first step's clipped gradients (--check)
    metrics: list[dict[str, float]] = field(default_factory=list)  # TRL's rewards/* and logps/* per micro-batch


def build_trl(
    setup: Setup, model_path: str, pairs: Sequence[dict[str, Any]], ids: Sequence[dict[str, list[int]]],
    workdir: Path, record: TrlRecord, *, lora_from: dict[str, Any] | None = None, snapshot_grads: bool = False,
) -> tuple[Any, list[dict[str, list[int]]]]:
    """TRL's DPOTrainer on ``pairs`` (conversational, as a TRL user gives them), then its dataset
    replaced by our token ids ``ids``; returns the trainer and TRL's own tokenization."""
    import torch
    from datasets import Dataset  # type: ignore[import-untyped]
    from peft import LoraConfig
    from transformers import AutoConfig, PrinterCallback, TrainerCallback
    from trl import DPOTrainer

    from omni_qwen3.training_adapter import LORA_EXCLUDE_MODULES, LORA_TARGET_MODULES, Qwen3OmniThinkerAdapter

    class RecordingDPOTrainer(DPOTrainer):  # type: ignore[misc]
        """Records each micro-batch's loss and tokens and each step's pre-clip gradient norm."""

        def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None) -> Any:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            record.micro_losses[-1].append(float(loss.detach()))
            record.micro_tokens[-1].append((int(inputs["attention_mask"].sum()), int(inputs["completion_mask"].sum())))
            if snapshot_grads:  # --check: the metrics TRL logs for this micro-batch (cleared when it logs)
                record.metrics.append({k: v[-1] for k, v in self._metrics["train"].items()
                                       if k.startswith(("rewards/", "logps/"))})
            return loss

        def _clip_grad_norm(self, model: Any) -> Any:
            norm = super()._clip_grad_norm(model)
            record.grad_norms.append(float(norm))
            return norm

    class StepClock(TrainerCallback):  # type: ignore[misc]
        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> None:
            if snapshot_grads and not record.grads:
                record.grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            record.step_ends.append(time.perf_counter())
            record.micro_losses.append([])
            record.micro_tokens.append([])

    tokenizer = Qwen3OmniThinkerAdapter().configure_tokenizer(model_path, AutoConfig.from_pretrained(model_path))
    tokenizer.padding_side = "left"
    dataset = Dataset.from_list([
        {"prompt": p["messages"], "chosen": [{"role": "assistant", "content": p["chosen"]}],
         "rejected": [{"role": "assistant", "content": p["rejected"]}]}
        for p in pairs
    ])
    lora = LoraConfig(
        r=setup.lora_rank, lora_alpha=setup.lora_alpha, lora_dropout=0.0,
        target_modules=list(LORA_TARGET_MODULES), exclude_modules=LORA_EXCLUDE_MODULES,
    )
    trainer = RecordingDPOTrainer(
        model=load_trl_thinker(model_path, setup), args=trl_config(setup, workdir / "trl"),  # type: ignore[arg-type]
        train_dataset=dataset, processing_class=tokenizer, peft_config=lora, callbacks=[StepClock()],
    )
    trainer.remove_callback(PrinterCallback)
    native = [{k: list(row[k]) for k in ("prompt_ids", "chosen_ids", "rejected_ids")} for row in trainer.train_dataset]
    trainer.train_dataset = Dataset.from_list([dict(i) for i in ids])  # our token ids (module docstring)
    if lora_from is not None:
        state = dict(trainer.model.named_parameters())
        missing = sorted(set(lora_from) ^ {n for n, p in state.items() if p.requires_grad})
        if missing:
            raise AssertionError(f"LoRA parameters differ by name between the sides: {missing[:6]}")
        with torch.no_grad():
            for name, value in lora_from.items():
                state[name].copy_(value)
    return trainer, native


def tokenization_difference(ours: Sequence[dict[str, list[int]]], native: Sequence[dict[str, list[int]]], tokenizer: Any) -> dict[str, Any]:
    """How TRL's own tokenization of the same pairs differs from ours (recorded, not asserted)."""
    prompts_equal = sum(o["prompt_ids"] == n["prompt_ids"] for o, n in zip(ours, native, strict=True))
    tails: dict[str, int] = {}
    for o, n in zip(ours, native, strict=True):
        for key in ("chosen_ids", "rejected_ids"):
            mine, theirs = o[key], n[key]
            tail = repr(tokenizer.decode(theirs[len(mine):])) if theirs[: len(mine)] == mine else "not a prefix"
            tails[tail] = tails.get(tail, 0) + 1
    return {"pairs": len(ours), "prompts_equal": prompts_equal, "completion_tail_trl_adds": tails,
            "completion_tokens_ours": sum(len(o["chosen_ids"]) + len(o["rejected_ids"]) for o in ours),
            "completion_tokens_trl_own": sum(len(n["chosen_ids"]) + len(n["rejected_ids"]) for n in native)}


def run_trl(
    setup: Setup, model_path: str, pairs: Sequence[dict[str, Any]], ids: Sequence[dict[str, list[int]]], workdir: Path,
    lora_from: dict[str, Any] | None,
) -> tuple[Result, dict[str, Any]]:
    record = TrlRecord()
    trainer, native = build_trl(setup, model_path, pairs, ids, workdir, record, lora_from=lora_from)
    trainable = trainable_parameters(trainer.model)
    trainer.train()
    if len(record.step_ends) != setup.total_steps:
        raise RuntimeError(f"TRL ran {len(record.step_ends)} optimizer steps, expected {setup.total_steps}.")
    result = Result(f"TRL {version('trl')} DPOTrainer", step_ends=record.step_ends, trainable=trainable)
    for losses, tokens in list(zip(record.micro_losses, record.micro_tokens))[1 : setup.total_steps]:
        if len(losses) != setup.accumulation:
            raise RuntimeError(f"A TRL step ran {len(losses)} micro-batches, expected {setup.accumulation}.")
        result.losses.append(sum(losses) / len(losses))  # equal micro-batches: the step's mean over pairs
        result.step_tokens.append(sum(t for t, _ in tokens))
        result.step_completion_tokens.append(sum(c for _, c in tokens))
    return result, tokenization_difference(ids, native, trainer.processing_class)


# --- --check: the whole-step differential ---------------------------------------------------------


def max_diff(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, str]:
    if set(a) != set(b):
        raise AssertionError(f"parameter names differ: {sorted(set(a) ^ set(b))[:6]}")
    worst = max(((float((a[k] - b[k]).abs().max()), k) for k in a), key=lambda x: x[0])
    return worst


def check(setup: Setup, model_path: str, workdir: Path, tol: float, out: Path) -> None:
    import torch

    pairs = text_pairs(setup.pairs_per_step, seed=setup.seed)
    train_file = write_text_pairs(pairs, workdir / "check.parquet")

    def our_step(logit_mask: bool) -> tuple[Any, dict[str, float], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        """One step of ours: (pairs, metrics, LoRA before, clipped gradients, LoRA after, frozen weights),
        parameters under TRL's names."""
        trainer = build_ours(setup, model_path, train_file, workdir / f"ours-mask-{logit_mask}", logit_mask=logit_mask)
        model = trainer.actor.model
        before = trainable_state(model, rename=True)
        frozen = {trl_name(n): p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
        grads: dict[str, Any] = {}
        names = {id(p): trl_name(n) for n, p in model.named_parameters() if p.requires_grad}

        def snapshot(optimizer: Any, args: Any, kwargs: Any) -> None:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    grads[names[id(p)]] = p.grad.detach().clone()

        trainer.actor.optimizer.register_step_pre_hook(snapshot)
        ((step, batch),) = list(trainer.batches(0))
        metrics = trainer.train_step(step, batch)
        return batch, metrics, before, grads, trainable_state(model, rename=True), frozen

    batch, ours, before, our_grads, our_after, our_frozen = our_step(logit_mask=False)
    ids = [pair_ids(p) for p in batch]
    if [p["index"] for p in pairs] != [int(p.prompt.index) for p in batch]:
        raise AssertionError("our step did not take the pairs in file order")
    record = TrlRecord()
    trainer, native = build_trl(setup, model_path, pairs, ids, workdir, record, lora_from=before, snapshot_grads=True)
    trl_before = trainable_state(trainer.model)
    trl_frozen = {n: p for n, p in trainer.model.named_parameters() if not p.requires_grad}
    shared = sorted(set(our_frozen) & set(trl_frozen))
    base_only = {"ours": len(set(our_frozen) - set(trl_frozen)), "trl": len(set(trl_frozen) - set(our_frozen))}
    if not shared or any(base_only.values()):
        raise AssertionError(f"frozen parameter names differ (only on one side: {base_only}); "
                             f"e.g. {sorted(set(our_frozen) ^ set(trl_frozen))[:4]}")
    base_diff = max(float((our_frozen[n] - trl_frozen[n].detach()).abs().max()) for n in shared)
    trainer.train()
    trl_after = trainable_state(trainer.model)
    our_tokens, our_completion = pair_tokens(batch)
    trl_tokens = sum(t for t, _ in record.micro_tokens[0])
    trl_completion = sum(c for _, c in record.micro_tokens[0])
    if (our_tokens, our_completion) != (trl_tokens, trl_completion):
        raise AssertionError(f"tokens differ: ours {our_tokens} ({our_completion} completion), TRL {trl_tokens} ({trl_completion})")
    trl_loss = sum(record.micro_losses[0]) / len(record.micro_losses[0])
    # Equal micro-batches: the mean of TRL's per-micro-batch means is the step's mean over pairs.
    metrics_trl = {k: sum(m[k] for m in record.metrics) / len(record.metrics) for k in record.metrics[0]}
    rows = {
        "loss": (ours["loss"], trl_loss),
        "grad_norm": (ours["actor/grad_norm"], record.grad_norms[0]),
        **{k: (ours[k], v) for k, v in metrics_trl.items()},
    }
    grad_diff, grad_at = max_diff(our_grads, record.grads)
    param_diff, param_at = max_diff(our_after, trl_after)
    init_diff, _ = max_diff(before, trl_before)
    moved = max(float((our_after[k] - v).abs().max()) for k, v in before.items())
    _, masked, *_ = our_step(logit_mask=True)

    print(f"\n--check: one DPO step (sigmoid, beta {setup.beta}) on {setup.pairs_per_step} text pairs, "
          f"{setup.accumulation} micro-batches of {setup.micro_pairs} pairs, LoRA r={setup.lora_rank} on q/k/v/o "
          f"(B ~ N(0, {setup.lora_b_std})), AdamW lr {setup.lr} wd {setup.weight_decay}, clip {setup.grad_clip} "
          f"({'acts' if ours['actor/grad_norm'] > setup.grad_clip else 'does not act'}), fp32 CPU; "
          f"{our_tokens} tokens ({our_completion} completion) on both sides")
    print(f"identical start: base weights max |diff| {base_diff:.1e}, LoRA init max |diff| {init_diff:.1e}")
    print(f"{'quantity':<22}{'ours':>16}{'TRL':>16}{'|diff|':>11}")
    for key, (a, b) in rows.items():
        print(f"{key:<22}{a:>16.8f}{b:>16.8f}{abs(a - b):>11.2e}")
    print(f"{'gradients (every elt)':<22}{'':>32}{grad_diff:>11.2e}  at {grad_at}")
    print(f"{'updated parameters':<22}{'':>32}{param_diff:>11.2e}  at {param_at} (largest update {moved:.1e})")
    print(f"our loss with the logit mask on: {masked['loss']:.8f} (|diff| to TRL {abs(masked['loss'] - trl_loss):.2e})")
    tokenization = tokenization_difference(ids, native, trainer.processing_class)
    print(f"TRL's own tokenization of these pairs: prompts equal in {tokenization['prompts_equal']}/{len(ids)}, "
          f"its completions add {tokenization['completion_tail_trl_adds']}")
    failures = [k for k, (a, b) in rows.items() if abs(a - b) > tol]
    failures += [name for name, d in (("gradients", grad_diff), ("parameters", param_diff), ("init", init_diff),
                                      ("base weights", base_diff)) if d > tol]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "dpo --check", "setup": asdict(setup), "tol": tol, "tokens": our_tokens,
        "completion_tokens": our_completion, "quantities": {k: {"ours": a, "trl": b, "abs_diff": abs(a - b)} for k, (a, b) in rows.items()},
        "max_abs_diff": {"gradients": grad_diff, "gradients_at": grad_at, "parameters": param_diff,
                         "parameters_at": param_at, "lora_init": init_diff, "base_weights": base_diff},
        "largest_update": moved, "our_loss_with_logit_mask": masked["loss"], "neutralised": NEUTRALISED,
        "trl_own_tokenization": tokenization, "passed": not failures,
        "versions": {p: version(p) for p in ("torch", "transformers", "peft", "trl")},
    }, indent=1))
    print(f"raw numbers: {out}")
    if failures:
        raise AssertionError(f"--check failed (tol {tol}): {failures}")
    print(f"--check passed: loss, grad norm, gradients and updated parameters equal within {tol}")


def probe_trl_media(setup: Setup, model_path: str, files: dict[str, Path]) -> dict[str, str]:
    """What TRL's DPOTrainer does with two of our image pairs and two audio pairs, given as a TRL
    user would (conversational, the checkpoint's processor): the evidence for ``TRL_MULTIMODAL_GAPS``."""
    import pyarrow.parquet as pq
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from PIL import Image
    from transformers import AutoProcessor
    from trl import DPOTrainer

    from omni_qwen3.training_adapter import LORA_EXCLUDE_MODULES, LORA_TARGET_MODULES

    tiny = replace(setup, pairs_per_step=2, micro_pairs=2, steps=0)
    processor = AutoProcessor.from_pretrained(model_path)
    found: dict[str, str] = {}
    for modality, file in files.items():
        rows = pq.read_table(file).slice(0, 2).to_pylist()
        data = []
        for row in rows:
            question = row["prompt"][0]["content"].replace(f"<{modality}>", "")
            example = {
                "prompt": [{"role": "user", "content": [{"type": modality}, {"type": "text", "text": question}]}],
                "chosen": [{"role": "assistant", "content": row["chosen"]["content"]}],
                "rejected": [{"role": "assistant", "content": row["rejected"]["content"]}],
            }
            if modality == "image":
                example["images"] = [Image.open(row["images"][0]).convert("RGB")]
            else:
                example["audios"] = list(row["audios"])
            data.append(example)
        lora = LoraConfig(r=tiny.lora_rank, lora_alpha=tiny.lora_alpha, target_modules=list(LORA_TARGET_MODULES),
                          exclude_modules=LORA_EXCLUDE_MODULES)
        try:
            trainer = DPOTrainer(
                model=load_trl_thinker(model_path, tiny), args=trl_config(tiny, file.parent / f"trl-{modality}"),  # type: ignore[arg-type]
                train_dataset=Dataset.from_list(data), processing_class=processor, peft_config=lora,
            )
        except Exception as error:  # noqa: BLE001 -- the failure is the finding
            cause = error.__cause__ or error.__context__
            found[modality] = (f"DPOTrainer(...) raised {type(error).__name__}: {str(error)[:120]}"
                               + (f" (from {type(cause).__name__} in the processor)" if cause else ""))
            continue
        batch = next(iter(trainer.get_train_dataloader()))
        kwargs = {k: v for k, v in batch.items() if k != "completion_mask"}
        labels = batch["input_ids"].masked_fill(batch["completion_mask"] == 0, -100)
        noise = dict(kwargs, pixel_values=torch.randn_like(kwargs["pixel_values"]) * 5)
        model = trainer.model.eval()
        with torch.no_grad():
            fused = [model(**k, labels=labels, fused_lm_head=True).log_probs for k in (kwargs, noise)]
            own = [model.get_base_model()(**k).logits for k in (kwargs, noise)]
        found[modality] = (
            f"vision dataset {trainer._is_vision_dataset}; TRL's loss log-probs, real picture vs random pixels: max "
            f"|diff| {float((fused[0] - fused[1]).abs().max()):.1e}; the thinker's own forward: "
            f"{float((own[0] - own[1]).abs().max()):.1e}"
        )
    return found


# --- the speed benchmark --------------------------------------------------------------------------


def speed(setup: Setup, model_path: str, workdir: Path, out: Path, *, skip_trl: bool, media_steps: int) -> None:
    pairs = text_pairs(setup.pairs_per_step * setup.total_steps, seed=setup.seed)
    train_file = write_text_pairs(pairs, workdir / "text.parquet")
    load_before = os.getloadavg()
    ours, ids, lora = run_ours(setup, model_path, train_file, workdir)
    theirs: Result | None = None
    tokenization: dict[str, Any] | None = None
    if not skip_trl:
        theirs, tokenization = run_trl(setup, model_path, pairs, ids, workdir, lora)
        if ours.trainable != theirs.trainable:
            raise AssertionError(f"Trainable parameters differ: ours {ours.trainable}, TRL {theirs.trainable}.")
        if (ours.step_tokens, ours.step_completion_tokens) != (theirs.step_tokens, theirs.step_completion_tokens):
            raise AssertionError(f"Tokens differ per step: ours {ours.step_tokens}, TRL {theirs.step_tokens}.")
    media: dict[str, Result] = {}
    files: dict[str, Path] = {}
    for modality in MEDIA_MODALITIES:
        media_setup = replace(setup, steps=media_steps)
        files[modality] = write_media_pairs(modality, media_setup.pairs_per_step * media_setup.total_steps, setup.seed,
                                            workdir)
        media[modality], _, _ = run_ours(media_setup, model_path, files[modality], workdir,
                                         name=f"omni-rl, {modality} pairs")
    probe = {} if skip_trl else probe_trl_media(setup, model_path, files)
    load_after = os.getloadavg()

    import torch

    print(
        f"\nDPO (sigmoid, beta {setup.beta}): {setup.pairs_per_step} pairs per step in {setup.accumulation} micro-batches "
        f"of {setup.micro_pairs} pairs, LoRA r={setup.lora_rank} on q/k/v/o ({ours.trainable} trainable), AdamW lr "
        f"{setup.lr}, fp32 CPU, torch threads {torch.get_num_threads()}, 1 warm-up + {setup.steps} timed steps "
        f"(media: {media_steps}), load average {load_before[0]:.1f} -> {load_after[0]:.1f}"
    )
    print(f"{'side':<34}{'steps/s':>9}{'tokens/s':>10}{'tokens':>8}{'compl.':>8}{'time (s)':>10}{'loss (last)':>13}")
    for side in (ours, *([theirs] if theirs else []), *media.values()):
        print(f"{side.name:<34}{side.steps_per_s():>9.3f}{side.tokens_per_s():>10.0f}{side.tokens:>8}"
              f"{sum(side.step_completion_tokens):>8}{side.seconds:>10.2f}{side.losses[-1]:>13.4f}")
    for modality, gap in TRL_MULTIMODAL_GAPS.items():
        print(f"TRL cannot train the {modality} pairs: {gap}" + (f" Probe: {probe[modality]}" if modality in probe else ""))
    ratio = ours.steps_per_s() / theirs.steps_per_s() if theirs else None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "dpo", "setup": asdict(setup), "media_steps": media_steps, "ours": ours.raw(),
        "peer": theirs.raw() if theirs else None, "media": {m: r.raw() for m, r in media.items()},
        "ratio_steps_per_s": ratio, "trl_multimodal_gaps": TRL_MULTIMODAL_GAPS, "trl_media_probe": probe,
        "neutralised": NEUTRALISED[:2],
        "trl_own_tokenization": tokenization, "load_average_before": load_before, "load_average_after": load_after,
        "cpus": os.cpu_count(), "machine": platform.platform(),
        "versions": {p: version(p) for p in ("torch", "transformers", "peft", "trl")},
    }, indent=1))
    print(f"raw numbers: {out}")
    for modality, side in media.items():
        print(f"ours, {modality} pairs / ours, text pairs: steps/s {side.steps_per_s() / ours.steps_per_s():.2f}x")
    if ratio is not None:
        print(f"ratio ours/TRL (text pairs): steps/s {ratio:.2f}x, tokens/s {ours.tokens_per_s() / theirs.tokens_per_s():.2f}x")  # type: ignore[union-attr]


# --- main -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = Setup()
    parser.add_argument("--check", action="store_true", help="the whole-step differential instead of the timing")
    parser.add_argument("--tol", type=float, default=1e-4, help="--check: the largest absolute difference allowed")
    parser.add_argument("--steps", type=int, default=defaults.steps, help="timed steps per side, after one warm-up")
    parser.add_argument("--media-steps", type=int, default=None, help="timed steps of the image and audio runs (default --steps)")
    parser.add_argument("--pairs", type=int, default=None, help="pairs per optimizer step (default 16; --check 8)")
    parser.add_argument("--micro-pairs", type=int, default=None, help="pairs per forward/backward (default 8; --check 4)")
    parser.add_argument("--lora-rank", type=int, default=defaults.lora_rank)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--threads", type=int, default=defaults.threads, help="torch threads, both sides")
    parser.add_argument("--grad-clip", type=float, default=None,
                        help="max gradient norm, both sides (default 1.0; --check 0.1, so that clipping acts)")
    parser.add_argument("--lora-b-std", type=float, default=0.2,
                        help="--check: LoRA B drawn N(0, std) on both sides (PEFT's zeros give A no gradient in step 1)")
    parser.add_argument("--skip-trl", action="store_true", help="our side alone (no TRL installed)")
    parser.add_argument("--out", type=Path, default=None, help="JSON of the raw numbers (default outputs/benchmarks/)")
    args = parser.parse_args()
    pairs = args.pairs or (8 if args.check else defaults.pairs_per_step)
    micro = args.micro_pairs or (4 if args.check else defaults.micro_pairs)
    if pairs % micro:
        parser.error(f"--micro-pairs must divide --pairs ({pairs})")
    if args.lora_rank <= 0:
        parser.error("--lora-rank must be positive (both sides train LoRA)")
    setup = Setup(pairs_per_step=pairs, micro_pairs=micro, steps=0 if args.check else args.steps,
                  lora_rank=args.lora_rank, lr=args.lr, threads=args.threads,
                  grad_clip=args.grad_clip or (0.1 if args.check else defaults.grad_clip), lora_b_std=args.lora_b_std if args.check else 0.0)

    import torch

    from omni_qwen3.tiny import build_tiny_qwen3_omni

    torch.set_num_threads(setup.threads)
    model_path = str(build_tiny_qwen3_omni())
    with tempfile.TemporaryDirectory(prefix="omni-rl-dpo-bench-") as tmp:
        if args.check:
            if args.skip_trl:
                parser.error("--check compares with TRL; it cannot --skip-trl")
            check(setup, model_path, Path(tmp), args.tol, args.out or Path("outputs/benchmarks/dpo-check.json"))
        else:
            speed(setup, model_path, Path(tmp), args.out or Path("outputs/benchmarks/dpo.json"),
                  skip_trl=args.skip_trl, media_steps=args.steps if args.media_steps is None else args.media_steps)


if __name__ == "__main__":
    main()
