"""One GPU: the local engine's training step vs TRL's GRPOTrainer on a mid-size Qwen3-Omni
thinker with random weights, and the memory plan of the real 30B-A3B thinker.

    uv run python benchmarks/gpu.py                  # ours; TRL too where it is installed
    UV_PROJECT_ENVIRONMENT=/tmp/benchvenv uv sync --locked --group bench
    UV_PROJECT_ENVIRONMENT=/tmp/benchvenv uv run --locked --group bench python benchmarks/gpu.py
    uv run python benchmarks/gpu.py --dry-run        # CPU, tiny sizes: shows that it runs
    python benchmarks/gpu.py                         # no uv: PYTHONPATH and OMNI_RL_MODEL_MODULES
                                                     # as benchmarks/README.md shows

The model is Qwen3-Omni-30B-A3B's thinker as its released config describes it (the sizes are
written below, with their source), with ``--layers`` of its 48 decoder layers (default 36,
24.2B parameters: a planned peak of about 68 GB, half an H200, at the default workload), built on the GPU in bf16
from random weights: nothing is downloaded. The tokenizer and chat template are the tiny
offline checkpoint's (ids < 4096 of the 152k vocabulary); prompts are the built-in task's
questions, text only (TRL's trainer cannot feed this model media, see benchmarks/trainer.py).

Both sides run the same model (same seed, same weights), the same prompts, group size,
lengths, LoRA, GSPO and optimizer settings as ``benchmarks/trainer.py`` (whose mapping
this script reuses), in bf16 with the KV cache, and are timed alike: a timestamp (after a
device synchronise) at the end of every optimizer step, one warm-up step, then ``--steps``
timed steps. The end-of-turn token is suppressed on both sides, so the generated token
counts are equal (asserted). Each side reports step time, generated tokens/s and peak GPU
memory (``torch.cuda.max_memory_allocated``; peak RSS of the process on the CPU), and the
torch / transformers / peft / trl versions found. Ours is the local engine's own step
(``omni_trainer.engines.local.step.train_step``: rollout, rewards, advantages, old log-probs, update),
with the local trainer's own ``Actor`` (it moves each micro-batch to the model's device) and
gradient checkpointing as the trainer enables it. The memory plans are
``omni_training.memory_plan``'s (the same arithmetic ``trainer doctor`` prints).

Only torch, transformers, peft, trl and the workspace packages are imported (no vLLM, verl
or Ray). Meant to finish in well under 8 minutes on an H200; ``--dry-run`` builds the tiny
sizes on the CPU instead and runs one timed step per side. Raw numbers go to
``outputs/benchmarks/gpu.json`` (``gpu-dry-run.json``). Not a CI gate; the ratio is last.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from omni_training.memory_plan import GB, PLAN_NOTES, TextShape, Workload, format_plan  # noqa: E402
from trainer import (  # noqa: E402  (benchmarks/ is not a package)
    Result,
    Setup,
    TrlRewardProbe,
    load_trl_thinker,
    our_overrides,
    questions,
    trainable_parameters,
    trl_config,
    version,
)

GPU_BYTES = 141e9  # one H200 (141 GB, 2**30-rounded: ~131 GiB usable by torch after the context)

# Qwen3-Omni-30B-A3B's thinker, from the released checkpoint's config.json
# (huggingface.co/Qwen/Qwen3-Omni-30B-A3B-Instruct, "thinker_config"; -Thinking and -Captioner
# share it): text_config, vision_config and audio_config sizes. The text decoder is a
# Qwen3-MoE: 48 layers, GQA 32/4 heads of 128, 128 experts of width 768, 8 per token, every
# layer sparse (decoder_sparse_step 1, no mlp_only_layers; intermediate_size is unused),
# untied lm_head over a 152,064-row vocabulary.
REAL_TEXT: dict[str, Any] = {
    "vocab_size": 152064, "hidden_size": 2048, "intermediate_size": 768, "moe_intermediate_size": 768,
    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "norm_topk_prob": True,
    "max_position_embeddings": 65536, "tie_word_embeddings": False, "rms_norm_eps": 1e-6,
}
REAL_MROPE_SECTION = [24, 20, 20]  # text_config.rope_scaling.mrope_section (sums to head_dim / 2)
REAL_VISION: dict[str, Any] = {
    "depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "patch_size": 16,
    "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 2048,
    "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24],
}
REAL_AUDIO: dict[str, Any] = {
    "d_model": 1280, "encoder_layers": 32, "encoder_attention_heads": 20, "encoder_ffn_dim": 5120,
    "num_mel_bins": 128, "output_dim": 2048, "downsample_hidden_size": 480, "n_window": 50,
    "n_window_infer": 800, "max_source_positions": 1500,
}
# --dry-run: the tiny offline model's sizes (omni_qwen3.tiny.TinySpec), built the same way.
TINY_TEXT: dict[str, Any] = {
    **REAL_TEXT, "vocab_size": 4096, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "num_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 4096,
}
TINY_MROPE_SECTION = [4, 2, 2]
TINY_VISION: dict[str, Any] = {
    **REAL_VISION, "depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64,
    "num_position_embeddings": 256, "deepstack_visual_indexes": [0],
}
TINY_AUDIO: dict[str, Any] = {
    **REAL_AUDIO, "d_model": 32, "encoder_layers": 2, "encoder_attention_heads": 2, "encoder_ffn_dim": 64,
    "output_dim": 64, "downsample_hidden_size": 16,
}
TOKEN_KEYS = ("audio_token_id", "image_token_id", "video_token_id", "audio_start_token_id", "vision_start_token_id",
              "user_token_id", "position_id_per_seconds")
TOP_TOKEN_KEYS = ("im_start_token_id", "im_end_token_id", "system_token_id", "user_token_id", "assistant_token_id")


# --- the model --------------------------------------------------------------------------------


def omni_config(text: dict[str, Any], vision: dict[str, Any], audio: dict[str, Any], mrope: list[int], tiny: Any) -> Any:
    """A ``Qwen3OmniMoeConfig`` (thinker only: no talker) with these sizes and the tiny
    checkpoint's token ids (its tokenizer is the one used)."""
    from transformers import Qwen3OmniMoeConfig

    thinker = tiny.thinker_config
    rope = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": mrope, "interleaved": True,
            "mrope_interleaved": True}
    text_config = {**text, "rope_parameters": rope, "pad_token_id": thinker.text_config.pad_token_id,
                   "eos_token_id": thinker.text_config.eos_token_id}
    config = Qwen3OmniMoeConfig(
        thinker_config={"text_config": text_config, "vision_config": vision, "audio_config": audio,
                        **{key: getattr(thinker, key) for key in TOKEN_KEYS}},
        enable_audio_output=False,
        **{key: getattr(tiny, key) for key in TOP_TOKEN_KEYS},
    )
    config.architectures = ["Qwen3OmniMoeForConditionalGeneration"]
    return config


def build(cls: Any, config: Any, device: str, dtype: Any, seed: int) -> Any:
    """``cls`` from ``config`` on ``device`` in ``dtype``, every matrix drawn from N(0, 0.02)
    in parameter order (so the Omni model and a bare thinker from one seed agree)."""
    import torch

    with torch.device(device):
        model = cls._from_config(config, dtype=dtype)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() >= 2:
                parameter.normal_(0.0, 0.02, generator=generator)
    return model


def count_parameters(config: Any, lora_rank: int) -> Any:
    """Parameter counts of the thinker ``config`` describes, as the local engine builds it
    (counted on the meta device by ``omni_training.model_loading.count_parameters``)."""
    from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter
    from omni_training.model_loading import count_parameters as count
    from omni_training.settings import LoraSettings

    return count(config, Qwen3OmniThinkerAdapter(), LoraSettings(rank=lora_rank, alpha=16))


# --- our side -----------------------------------------------------------------------------------


def run_ours(setup: Setup, config: Any, tiny_path: str, rows: Sequence[dict[str, Any]], workdir: Path,
             device: str, dtype: Any, checkpointing: bool) -> Result:
    import torch

    from omni_contracts import get_rollout_adapter
    from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter
    from omni_rewards import SCORERS, RewardManager
    from omni_rollout.agent_loops import get_agent_loop
    from omni_rollout.local_engine import LocalEngine, find_policy_module
    from omni_data import builtin as builtin_task
    from omni_trainer.config import load_config
    from omni_rollout.placeholders import placeholder_token_ids
    from omni_trainer.prompts import encode_builtin
    from omni_trainer.settings_builders import actor_settings, lora_settings, optim_settings, reward_manager_config
    from omni_trainer.engines.local.step import StepParts, train_step
    from omni_trainer.engines.local.tasks.text_rl import TextSampler
    from omni_training.actor import Actor
    from omni_training.model_loading import apply_lora, enable_gradient_checkpointing
    from transformers import AutoConfig

    cfg = load_config(our_overrides(setup, tiny_path, None, workdir / "ours", dtype="bfloat16", device=device,
                                    checkpointing=checkpointing))
    adapter = Qwen3OmniThinkerAdapter()
    tiny_config = AutoConfig.from_pretrained(tiny_path)
    processor = adapter.configure_processor(tiny_path, tiny_config)
    tokenizer = adapter.configure_tokenizer(tiny_path, tiny_config)
    model = build(adapter.policy_class(config), config, device, dtype, setup.seed)
    adapter.configure_model(model, config)
    if checkpointing:  # the decoder layers recompute in the backward pass, as the local trainer does it
        enable_gradient_checkpointing(model, lora=setup.lora_rank > 0)
    if setup.lora_rank:
        model = apply_lora(model, adapter, lora_settings(cfg))
    actor = Actor(model, adapter, config, actor_settings(cfg), optim_settings(cfg, setup.total_steps))
    rollout_adapter = get_rollout_adapter(cfg.actor_rollout_ref.rollout.pipeline())
    mode = cfg.actor_rollout_ref.rollout.pipeline_mode
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    engine = LocalEngine(
        find_policy_module(actor.model, rollout_adapter, mode), eos_token_ids=(eos,), pad_token_id=tokenizer.pad_token_id,
        stage_id=rollout_adapter.policy_stage_id(mode),
        suppress_token_ids=(*placeholder_token_ids(tokenizer, processor), eos),  # every sample runs to the limit
    )
    rewards = RewardManager(reward_manager_config(cfg), registry=SCORERS)
    sampler = TextSampler(cfg, engine, get_agent_loop(cfg.actor_rollout_ref.rollout.agent.default_agent_loop),
                          rollout_adapter, mode, adapter.extra_field_specs, tokenizer, rewards)
    parts = StepParts(cfg, sampler, actor, adapter, pad_token_id=engine.pad_token_id)
    prepared = [
        encode_builtin(processor, {**row, "data_source": builtin_task.DATA_SOURCE}, setup.max_prompt_length)
        for row in rows
    ]
    result = Result("omni-rl local engine", trainable=trainable_parameters(actor.model))
    rewards.start()
    try:
        for step in range(1, setup.total_steps + 1):
            batch = prepared[(step - 1) * setup.prompts_per_step : step * setup.prompts_per_step]
            before = engine.stats.generated_tokens
            metrics = train_step(parts, step, batch)
            if device == "cuda":
                torch.cuda.synchronize()
            result.step_ends.append(time.perf_counter())
            if step > 1:
                result.step_tokens.append(engine.stats.generated_tokens - before)
                result.rewards.append(metrics["critic/score/mean"])
    finally:
        rewards.close()
    return result


# --- TRL ----------------------------------------------------------------------------------------


def run_trl(setup: Setup, config: Any, tiny_path: str, rows: Sequence[dict[str, Any]], workdir: Path,
            device: str, dtype: Any, checkpointing: bool) -> Result:
    import torch
    from datasets import Dataset  # type: ignore[import-untyped]
    from peft import LoraConfig
    from transformers import AutoConfig, PrinterCallback, Qwen3OmniMoeThinkerForConditionalGeneration, TrainerCallback
    from trl import GRPOTrainer

    from omni_qwen3.training_adapter import LORA_EXCLUDE_MODULES, LORA_TARGET_MODULES, Qwen3OmniThinkerAdapter
    from omni_rollout.placeholders import placeholder_token_ids

    tokenizer = Qwen3OmniThinkerAdapter().configure_tokenizer(tiny_path, AutoConfig.from_pretrained(tiny_path))
    tokenizer.padding_side = "left"
    model = build(Qwen3OmniMoeThinkerForConditionalGeneration, config.thinker_config, device, dtype, setup.seed)
    model.base_model_prefix = "model"  # TRL's fused head finds the text decoder (see benchmarks/trainer.py)
    model.visual.requires_grad_(False)
    model.audio_tower.requires_grad_(False)
    ends: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if device == "cuda":
                torch.cuda.synchronize()
            ends.append(time.perf_counter())

    lora = None
    if setup.lora_rank:
        lora = LoraConfig(r=setup.lora_rank, lora_alpha=setup.lora_alpha, lora_dropout=0.0,
                          target_modules=list(LORA_TARGET_MODULES), exclude_modules=LORA_EXCLUDE_MODULES)
    probe = TrlRewardProbe()
    suppress = [*placeholder_token_ids(tokenizer), tokenizer.convert_tokens_to_ids("<|im_end|>")]
    trainer = GRPOTrainer(
        model=model, reward_funcs=probe, args=trl_config(setup, workdir / "trl", suppress, gpu=device == "cuda", checkpointing=checkpointing),
        train_dataset=Dataset.from_list([{"prompt": r["messages"], "ground_truth": r["ground_truth"]} for r in rows]),
        processing_class=tokenizer, peft_config=lora, callbacks=[StepClock()],
    )
    trainer.remove_callback(PrinterCallback)
    trainable = trainable_parameters(trainer.model)
    trainer.train()
    if len(ends) != setup.total_steps:
        raise RuntimeError(f"TRL ran {len(ends)} optimizer steps, expected {setup.total_steps}.")
    timed = [call for call in probe.calls if call[0] >= 1]
    return Result(f"TRL {version('trl')} GRPOTrainer", step_ends=ends, step_tokens=[t for _, t, _ in timed],
                  rewards=[r for _, _, r in timed], trainable=trainable)


# --- main ---------------------------------------------------------------------------------------


def peak_memory(device: str) -> float:
    import torch

    if device == "cuda":
        return float(torch.cuda.max_memory_allocated())
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)  # process peak, KiB on Linux


def release(device: str) -> None:
    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes, one timed step per side")
    parser.add_argument("--layers", type=int, default=36, help="decoder layers of the real thinker's 48")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per side (default 2; dry run 1)")
    parser.add_argument("--prompts", type=int, default=None, help="prompts per step (default 8; dry run 2)")
    parser.add_argument("--n", type=int, default=None, help="samples per prompt (default 8; dry run 2)")
    parser.add_argument("--response-length", type=int, default=None, help="new tokens (default 128; dry run 4)")
    parser.add_argument("--micro-batch", type=int, default=None, help="rows per forward/backward (default 16; dry run 4)")
    parser.add_argument("--lora-rank", type=int, default=16, help="0: full fine-tune")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="both sides (the plan's '+ ckpt')")
    parser.add_argument("--skip-trl", action="store_true", help="ours only")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    dry = args.dry_run

    def sized(cpu: bool) -> Setup:
        def pick(value: int | None, gpu: int, tiny: int) -> int:
            return value if value is not None else (tiny if cpu else gpu)

        return Setup(
            prompts_per_step=pick(args.prompts, 8, 2), n=pick(args.n, 8, 2),
            max_response_length=pick(args.response_length, 128, 4), micro_batch=pick(args.micro_batch, 16, 4),
            lora_rank=args.lora_rank, steps=pick(args.steps, 2, 1), lr=1e-5, max_prompt_length=64,
        )

    setup, gpu_setup = sized(dry), sized(False)
    started = time.perf_counter()
    import torch
    import transformers
    from transformers import AutoConfig

    from omni_qwen3.tiny import build_tiny_qwen3_omni

    versions = {p: version(p) for p in ("torch", "transformers", "peft", "trl")}
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + f" (transformers {transformers.__version__})")
    device = "cpu" if dry else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("No CUDA device: run with --dry-run on a CPU.")
    tiny_path = str(build_tiny_qwen3_omni())
    tiny = AutoConfig.from_pretrained(tiny_path)

    # The plan for the real thinker on one 141 GB GPU, whatever this machine is.
    real = omni_config(REAL_TEXT, REAL_VISION, REAL_AUDIO, REAL_MROPE_SECTION, tiny)
    typical = Workload(prompts=8, n=8, prompt_tokens=1024, response_tokens=1024, micro_batch=4, lora_rank=16)
    print(format_plan("Memory plan: Qwen3-Omni-30B-A3B thinker (48 layers), one 141 GB GPU, bf16",
                      count_parameters(real, typical.lora_rank), TextShape.from_config(real), typical, GPU_BYTES))
    print(PLAN_NOTES)

    # The plan of the GPU run (printed by the dry run too, which runs the tiny sizes instead).
    gpu_text = {**REAL_TEXT, "num_hidden_layers": args.layers}
    gpu_config = omni_config(gpu_text, REAL_VISION, REAL_AUDIO, REAL_MROPE_SECTION, tiny)
    prompt_tokens = 32  # the built-in questions in the chat template: <= 26 tokens
    gpu_work = Workload(gpu_setup.prompts_per_step, gpu_setup.n, prompt_tokens, gpu_setup.max_response_length,
                        gpu_setup.micro_batch, gpu_setup.lora_rank)
    gpu_counts = count_parameters(gpu_config, gpu_setup.lora_rank)
    mid = f"mid-size thinker ({args.layers} of 48 layers)"
    print(format_plan(f"Memory plan of the GPU run: {mid}, one 141 GB GPU, bf16", gpu_counts,
                      TextShape.from_config(gpu_config), gpu_work, GPU_BYTES))

    text = TINY_TEXT if dry else gpu_text
    config = omni_config(TINY_TEXT, TINY_VISION, TINY_AUDIO, TINY_MROPE_SECTION, tiny) if dry else gpu_config
    counts = count_parameters(config, setup.lora_rank)
    name = "tiny thinker (dry run)" if dry else mid
    rows = questions(setup.prompts_per_step * setup.total_steps, seed=setup.seed)

    dtype = torch.bfloat16
    results: list[tuple[Result, float]] = []
    with tempfile.TemporaryDirectory(prefix="omni-rl-gpu-") as tmp:
        release(device)
        ours = run_ours(setup, config, tiny_path, rows, Path(tmp), device, dtype, args.gradient_checkpointing)
        results.append((ours, peak_memory(device)))
        release(device)
        skip = args.skip_trl or versions["trl"] == "not installed"
        if skip:
            print("TRL: " + ("--skip-trl" if args.skip_trl else "not installed here (it comes from the bench "
                             "dependency group, see benchmarks/README.md)") + "; its side is skipped.")
        else:
            trl = run_trl(setup, config, tiny_path, rows, Path(tmp), device, dtype, args.gradient_checkpointing)
            results.append((trl, peak_memory(device)))
            release(device)
    expected = setup.steps * setup.samples_per_step * setup.max_response_length
    for result, _ in results:
        if result.tokens != expected:
            raise AssertionError(f"{result.name} generated {result.tokens} tokens, expected {expected}.")

    where = "CPU (peak RSS)" if dry else torch.cuda.get_device_name(0)
    print(f"\n{name}: {counts.total / 1e9:.2f}B params, bf16, {device} ({where}); {setup.prompts_per_step} prompts x "
          f"n={setup.n}, {setup.max_response_length} new tokens, micro-batch {setup.micro_batch}, LoRA r={setup.lora_rank}, "
          f"GSPO, gradient checkpointing {'on' if args.gradient_checkpointing else 'off'}; 1 warm-up + {setup.steps} timed steps; total wall {time.perf_counter() - started:.0f} s")
    print(f"{'side':<28}{'step (s)':>10}{'tokens/s':>10}{'tokens':>8}{'peak GB':>9}")
    for result, peak in results:
        print(f"{result.name:<28}{result.seconds / setup.steps:>10.2f}{result.tokens_per_s():>10.0f}"
              f"{result.tokens:>8}{peak / GB:>9.1f}")
    out = args.out or Path("outputs/benchmarks") / ("gpu-dry-run.json" if dry else "gpu.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "benchmark": "gpu", "dry_run": dry, "gradient_checkpointing": args.gradient_checkpointing, "setup": dataclasses.asdict(setup), "layers": text["num_hidden_layers"],
        "params": dataclasses.asdict(counts), "device": where, "versions": versions, "machine": platform.platform(),
        "cpus": os.cpu_count(), "sides": [{**r.raw(), "peak_bytes": peak} for r, peak in results],
    }
    if len(results) == 2:
        record["ratio_steps_per_s"] = results[0][0].steps_per_s() / results[1][0].steps_per_s()
    out.write_text(json.dumps(record, indent=1))
    print(f"raw numbers: {out}")
    if len(results) == 2:
        print(f"ratio ours/TRL: steps/s {record['ratio_steps_per_s']:.2f}x")


if __name__ == "__main__":
    main()
