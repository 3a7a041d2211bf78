"""The local engine's training step vs TRL's GRPOTrainer, configured alike, on the tiny thinker.

    UV_PROJECT_ENVIRONMENT=/tmp/benchvenv uv sync --locked --group bench
    UV_PROJECT_ENVIRONMENT=/tmp/benchvenv uv run --locked --group bench python benchmarks/trainer.py [--modality text]
    uv run python benchmarks/trainer.py --modality image+audio   # no TRL needed

TRL comes from the ``bench`` dependency group, which CI never installs; the separate
environment keeps it out of the project's ``.venv``. Both sides train the same tiny
Qwen3-Omni thinker (random weights, built offline) from one checkpoint, with the same group
size, lengths, LoRA targets, optimizer, GSPO objective and batch sizes, fp32 on the CPU with
the same torch threads. The mapping of each setting is written beside it in
``our_overrides`` and ``trl_config``; benchmarks/README.md has it as a table.

Both sides are timed the same way: a timestamp at the end of every optimizer step (ours
after ``train_step`` returns, TRL's in ``TrainerCallback.on_step_end``), one warm-up step,
then ``--steps`` timed steps: the time is from the end of the warm-up step to the end of the
last one, data loading included on both sides. Per-step logging is off on both (ours: no
``fit`` bookkeeping, metrics.jsonl, curve.png or checkpoints; TRL: ``logging_strategy="no"``,
no printer callback); each side still computes its step metrics, as it must. The end-of-turn
token is suppressed on both sides, so every sample is exactly ``--response-length`` tokens
and both generate the same number of tokens (asserted).

``--modality text`` (the default): the built-in task's questions without their media, ours
vs TRL. ``--modality image+audio``: the built-in task as the embedded default trains it, a
picture and a tone per prompt. TRL's GRPOTrainer cannot train Qwen3-Omni on such prompts
(see ``TRL_MULTIMODAL_GAPS``), so that variant compares our batched rollout with our
one-``generate``-per-prompt rollout (``LocalEngine.prompts_per_call=1``, the engine before
multimodal batching), all else equal.

Prints steps/s, generated tokens/s and mean reward of each side, then the ratio (last). The
raw numbers (per-step times, tokens, load, versions) go to
``outputs/benchmarks/trainer-<modality>.json``. Not a CI gate.

Torch runs one thread by default (``--threads``). On a CPU shared with other jobs, OpenMP
threads that spin-wait on each other slow tiny-model calls down 10-30x (measured here: one
``generate`` of 8 x 4 tokens took 1.9 s with two threads and 0.06 s with one while other jobs
ran), and the side that makes more small calls suffers most; one thread keeps the ratio
about the trainers rather than the neighbours.

TRL generates with its regular (non-vLLM) path: one left-padded ``generate`` over the whole
generation batch (prompts x n rows), KV cache on, as ours does. Its faster non-vLLM option,
transformers' continuous batching (``use_transformers_continuous_batching=True``), fails on
this model (transformers 5.10: ``'Qwen3OmniMoeThinkerConfig' object has no attribute
'num_attention_heads'`` when it sizes its paged cache), so a user has the regular path.

One workaround is needed: TRL's fused log-prob head reaches the decoder through
``model.base_model``, which for the thinker class is the thinker itself (its
``base_model_prefix`` is ``"thinker"``, the name it has inside the full Omni model). The
benchmark sets ``base_model_prefix = "model"`` on its own thinker instance so that TRL finds
the text decoder. No class or library code is changed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MODALITIES = ("text", "image+audio")
TRL_MULTIMODAL_GAPS = (
    "its prompt tokenization calls processor.apply_chat_template(conversation=...), while the "
    "Qwen3-Omni processor's argument is `conversations` (a TypeError);",
    "its loss forward passes image tensors only (pixel_values, image_grid_thw, ...), never "
    "input_features / feature_attention_mask, so audio would not reach the loss;",
    "its fused log-prob head runs `model.base_model`, the thinker's text decoder, directly, so "
    "the thinker's image and audio embeddings are never merged into the sequence.",
)


@dataclass(frozen=True)
class Setup:
    """What both sides share."""

    prompts_per_step: int = 8
    n: int = 8  # samples per prompt (the GRPO group)
    max_prompt_length: int = 64
    max_response_length: int = 16
    micro_batch: int = 32  # samples per forward/backward
    lora_rank: int = 16  # 0: full fine-tune of the thinker's text model and heads
    lora_alpha: int = 32
    lr: float = 1e-2
    clip_low: float = 3e-4  # the packaged GSPO defaults
    clip_high: float = 4e-4
    steps: int = 8  # timed steps, after one warm-up step
    seed: int = 0
    modality: str = "text"  # one of MODALITIES
    threads: int = 1

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.n

    @property
    def total_steps(self) -> int:
        return self.steps + 1


@dataclass
class Result:
    name: str
    step_ends: list[float] = field(default_factory=list)  # perf_counter at each optimizer step's end, warm-up first
    step_tokens: list[int] = field(default_factory=list)  # generated tokens of each timed step
    rewards: list[float] = field(default_factory=list)  # mean reward of each timed step
    trainable: int = 0

    @property
    def seconds(self) -> float:
        """From the end of the warm-up step to the end of the last timed step."""
        return self.step_ends[-1] - self.step_ends[0]

    @property
    def tokens(self) -> int:
        return sum(self.step_tokens)

    def steps_per_s(self) -> float:
        return (len(self.step_ends) - 1) / self.seconds

    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    def raw(self) -> dict[str, Any]:
        times = [b - a for a, b in zip(self.step_ends, self.step_ends[1:])]
        return {"name": self.name, "step_seconds": times, "step_tokens": self.step_tokens, "rewards": self.rewards,
                "trainable_parameters": self.trainable, "seconds": self.seconds, "tokens": self.tokens,
                "steps_per_s": self.steps_per_s(), "tokens_per_s": self.tokens_per_s()}


def trainable_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def questions(count: int, seed: int) -> list[dict[str, Any]]:
    """The built-in task's rows, text only: the question and the reward's ground truth."""
    from omni_data.builtin import builtin_rows

    rows = []
    for row in builtin_rows(count, seed=seed):
        text = next(part["text"] for part in row["messages"][0]["content"] if part["type"] == "text")
        rows.append({"messages": [{"role": "user", "content": text}], "ground_truth": row["ground_truth"], "index": row["index"]})
    return rows


# --- ours ---------------------------------------------------------------------------------------


def our_overrides(
    setup: Setup, model_path: str, train_file: Path | None, run_dir: Path, *, dtype: str = "float32",
    device: str = "cpu", checkpointing: bool = False,
) -> list[str]:
    """``train_file=None``: the built-in task itself (image + audio prompts), rows seeded as
    :func:`omni_data.builtin.builtin_rows` ``(prompts x steps, seed)``."""
    from omni_qwen3.training_adapter import LORA_TARGET_MODULES

    data = (
        [f"data.train_files=[{train_file}]"] if train_file is not None
        else [f"data.builtin_task_size={setup.prompts_per_step * setup.total_steps}", f"data.seed={setup.seed}"]
    )
    return [
        f"actor_rollout_ref.model.path={model_path}",
        *data,
        f"data.train_batch_size={setup.prompts_per_step}",
        f"data.max_prompt_length={setup.max_prompt_length}",
        f"data.max_response_length={setup.max_response_length}",
        "data.shuffle=false",
        f"actor_rollout_ref.rollout.n={setup.n}",
        "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.top_p=1.0",
        "actor_rollout_ref.rollout.top_k=-1",
        f"actor_rollout_ref.model.lora_rank={setup.lora_rank}",
        f"actor_rollout_ref.model.lora_alpha={setup.lora_alpha}",
        f"actor_rollout_ref.model.target_modules=[{','.join(LORA_TARGET_MODULES)}]",
        "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        f"actor_rollout_ref.actor.clip_ratio_low={setup.clip_low}",
        f"actor_rollout_ref.actor.clip_ratio_high={setup.clip_high}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={setup.prompts_per_step}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={setup.micro_batch}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.entropy_coeff=0.0",
        "actor_rollout_ref.actor.grad_clip=1.0",
        f"actor_rollout_ref.actor.dtype={dtype}",
        f"trainer.device={device}",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={str(checkpointing).lower()}",
        f"actor_rollout_ref.actor.optim.lr={setup.lr}",
        "actor_rollout_ref.actor.optim.weight_decay=0.0",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=0",
        "actor_rollout_ref.actor.optim.lr_scheduler_type=constant",
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=true",
        "algorithm.use_kl_in_reward=false",
        f"trainer.total_training_steps={setup.total_steps}",
        f"trainer.seed={setup.seed}",
        f"trainer.default_local_dir={run_dir}",
        "trainer.resume_mode=disable",
    ]


def write_train_file(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    from omni_data.schema import rl_row, write_rl_parquet
    from omni_data.builtin import DATA_SOURCE

    return write_rl_parquet(
        [
            rl_row(data_source=DATA_SOURCE, messages=row["messages"], ground_truth=row["ground_truth"],
                   ability="digits", extra_info={"index": row["index"]})
            for row in rows
        ],
        path,
    )


def run_ours(
    setup: Setup, model_path: str, rows: Sequence[dict[str, Any]], workdir: Path, *,
    prompts_per_call: int | None = None, name: str = "omni-rl local engine",
) -> tuple[Result, list[list[int]]]:
    from omni_trainer.config import load_config
    from omni_trainer.engines.local.trainer import LocalTrainer
    from omni_trainer.resolved import resolve_run

    train_file = write_train_file(rows, workdir / "train.parquet") if setup.modality == "text" else None
    trainer = LocalTrainer(resolve_run(load_config(our_overrides(setup, model_path, train_file, workdir / name.replace(" ", "-")))))
    trainer.setup()
    engine = trainer.engine
    # Every sample runs to the length limit, as TRL's (see the module docstring).
    engine.suppress_token_ids = (*engine.suppress_token_ids, *engine.eos_token_ids)
    engine.prompts_per_call = prompts_per_call
    prompt_ids = [trainer.train_rows[i].inputs["input_ids"][0].tolist() for i in range(len(trainer.train_rows))]
    result = Result(name, trainable=trainable_parameters(trainer.actor.model))
    trainer.task.start()
    try:
        for step, batch in trainer.batches(0):
            tokens_before = engine.stats.generated_tokens
            metrics = trainer.train_step(step, batch)
            result.step_ends.append(time.perf_counter())
            if step > 1:  # the first step is the warm-up
                result.step_tokens.append(engine.stats.generated_tokens - tokens_before)
                result.rewards.append(metrics["critic/score/mean"])
    finally:
        trainer.task.close()
    return result, prompt_ids


# --- TRL ------------------------------------------------------------------------------------------


def trl_config(
    setup: Setup, output_dir: Path, suppress: Sequence[int], *, gpu: bool = False, checkpointing: bool = False
) -> Any:
    """``gpu=False``: fp32 on the CPU (actor.dtype=float32); ``gpu=True``: bf16 on the GPU
    (actor.dtype=bfloat16, the model loaded in bf16)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(output_dir),
        use_cpu=not gpu, bf16=gpu, fp16=False,
        gradient_checkpointing=checkpointing,  # ours checkpoints only in benchmarks/gpu.py, when asked
        max_steps=setup.total_steps,  # trainer.total_training_steps
        num_generations=setup.n,  # rollout.n
        per_device_train_batch_size=setup.micro_batch,  # actor.ppo_micro_batch_size_per_gpu
        # One generation batch of prompts_per_step x n samples per optimizer step:
        # data.train_batch_size = actor.ppo_mini_batch_size = prompts_per_step.
        gradient_accumulation_steps=setup.samples_per_step // setup.micro_batch,
        num_iterations=1,  # actor.ppo_epochs
        max_completion_length=setup.max_response_length,  # data.max_response_length
        temperature=1.0, top_p=1.0, top_k=0,  # rollout.temperature/top_p/top_k (-1 and 0: off)
        # Our engine's suppress_token_ids, and the end-of-turn token on both sides (module docstring).
        generation_kwargs={"suppress_tokens": list(suppress)},
        use_transformers_continuous_batching=False,  # fails on this model (module docstring)
        importance_sampling_level="sequence",  # policy_loss.loss_mode=gspo
        loss_type="grpo",  # loss_agg_mode=seq-mean-token-mean
        epsilon=setup.clip_low, epsilon_high=setup.clip_high,  # clip_ratio_low/high
        scale_rewards="group",  # adv_estimator=grpo, norm_adv_by_std_in_grpo=true
        beta=0.0,  # use_kl_loss=false, use_kl_in_reward=false
        entropy_coef=0.0,  # actor.entropy_coeff
        mask_truncated_completions=False,  # ours keeps truncated responses in the loss
        router_aux_loss_coef=0.0,  # ours adds no MoE load-balancing loss
        learning_rate=setup.lr, lr_scheduler_type="constant", warmup_steps=0,  # actor.optim.*
        optim="adamw_torch", weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
        max_grad_norm=1.0,  # actor.grad_clip
        shuffle_dataset=False,  # data.shuffle=false
        seed=setup.seed,
        logging_strategy="no", report_to="none", save_strategy="no", disable_tqdm=True,
    )


class TrlRewardProbe:
    """The built-in task's reward for TRL; also counts each step's generated tokens and rewards."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, float]] = []  # (global step before it, tokens, mean reward)

    def __call__(
        self, completions: list[list[dict[str, str]]], completion_ids: list[list[int]],
        ground_truth: list[str], trainer_state: Any, **_: Any,
    ) -> list[float | None]:
        from omni_rewards.scorers.builtin_digits import score_digits

        scores = [
            score_digits(completion[0]["content"], truth)["score"]
            for completion, truth in zip(completions, ground_truth, strict=True)
        ]
        self.calls.append((trainer_state.global_step, sum(len(ids) for ids in completion_ids), sum(scores) / len(scores)))
        return list(scores)


def load_trl_thinker(model_path: str, setup: Setup) -> Any:
    import torch
    import transformers
    from transformers import Qwen3OmniMoeThinkerForConditionalGeneration

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # the talker and code2wav weights are not loaded (as intended)
    try:
        model = Qwen3OmniMoeThinkerForConditionalGeneration.from_pretrained(model_path, dtype=torch.float32)
    finally:
        transformers.logging.set_verbosity(verbosity)
    # TRL's fused LM head calls ``model.base_model`` for the decoder's hidden states; the
    # thinker's prefix names it inside the full Omni model, so point it at the text decoder.
    model.base_model_prefix = "model"
    if setup.lora_rank == 0:  # as our adapter does: the encoders stay frozen
        model.visual.requires_grad_(False)
        model.audio_tower.requires_grad_(False)
    return model


def run_trl(setup: Setup, model_path: str, rows: Sequence[dict[str, Any]], workdir: Path) -> tuple[Result, list[list[int]]]:
    from datasets import Dataset  # type: ignore[import-untyped]
    from peft import LoraConfig
    from transformers import AutoConfig, PrinterCallback, TrainerCallback
    from trl import GRPOTrainer

    from omni_qwen3.training_adapter import LORA_EXCLUDE_MODULES, LORA_TARGET_MODULES, Qwen3OmniThinkerAdapter
    from omni_rollout.placeholders import placeholder_token_ids

    tokenizer = Qwen3OmniThinkerAdapter().configure_tokenizer(model_path, AutoConfig.from_pretrained(model_path))
    tokenizer.padding_side = "left"
    dataset = Dataset.from_list([{"prompt": row["messages"], "ground_truth": row["ground_truth"]} for row in rows])
    prompt_ids = [
        list(tokenizer.apply_chat_template(row["messages"], add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])
        for row in rows
    ]
    lora = None
    if setup.lora_rank:
        lora = LoraConfig(
            r=setup.lora_rank, lora_alpha=setup.lora_alpha, lora_dropout=0.0,
            target_modules=list(LORA_TARGET_MODULES), exclude_modules=LORA_EXCLUDE_MODULES,
        )
    ends: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            ends.append(time.perf_counter())

    probe = TrlRewardProbe()
    suppress = [*placeholder_token_ids(tokenizer), tokenizer.convert_tokens_to_ids("<|im_end|>")]
    trainer = GRPOTrainer(
        model=load_trl_thinker(model_path, setup), reward_funcs=probe,
        args=trl_config(setup, workdir / "trl", suppress),
        train_dataset=dataset, processing_class=tokenizer, peft_config=lora, callbacks=[StepClock()],
    )
    trainer.remove_callback(PrinterCallback)  # one dict per step otherwise
    trainable = trainable_parameters(trainer.model)
    trainer.train()
    if len(ends) != setup.total_steps:
        raise RuntimeError(f"TRL ran {len(ends)} optimizer steps, expected {setup.total_steps}.")
    timed = [call for call in probe.calls if call[0] >= 1]  # generated after the warm-up step
    result = Result(
        f"TRL {version('trl')} GRPOTrainer", step_ends=ends, step_tokens=[tokens for _, tokens, _ in timed],
        rewards=[reward for _, _, reward in timed], trainable=trainable,
    )
    return result, prompt_ids


def version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(package)
    except PackageNotFoundError:
        return "not installed"


# --- main -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = Setup()
    parser.add_argument("--modality", choices=MODALITIES, default=defaults.modality)
    parser.add_argument("--steps", type=int, default=defaults.steps, help="timed steps per side, after one warm-up step")
    parser.add_argument("--prompts", type=int, default=defaults.prompts_per_step, help="prompts per step")
    parser.add_argument("--n", type=int, default=defaults.n, help="samples per prompt")
    parser.add_argument("--response-length", type=int, default=defaults.max_response_length)
    parser.add_argument("--micro-batch", type=int, default=defaults.micro_batch, help="samples per forward/backward")
    parser.add_argument("--lora-rank", type=int, default=defaults.lora_rank, help="0: full fine-tune")
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--threads", type=int, default=defaults.threads, help="torch threads, both sides (see the docstring)")
    parser.add_argument("--out", type=Path, default=None, help="JSON of the raw numbers (default outputs/benchmarks/)")
    args = parser.parse_args()
    setup = Setup(
        prompts_per_step=args.prompts, n=args.n, max_response_length=args.response_length,
        micro_batch=args.micro_batch, lora_rank=args.lora_rank, lr=args.lr, steps=args.steps,
        modality=args.modality, threads=args.threads,
    )
    if setup.samples_per_step % setup.micro_batch:
        parser.error(f"--micro-batch must divide prompts x n = {setup.samples_per_step}")

    import torch

    from omni_qwen3.tiny import build_tiny_qwen3_omni

    torch.set_num_threads(setup.threads)
    model_path = str(build_tiny_qwen3_omni())
    rows = questions(setup.prompts_per_step * setup.total_steps, seed=setup.seed)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="omni-rl-bench-") as tmp:
        ours, our_prompts = run_ours(setup, model_path, rows, Path(tmp))
        if setup.modality == "text":
            theirs, peer_prompts = run_trl(setup, model_path, rows, Path(tmp))
        else:
            theirs, peer_prompts = run_ours(
                setup, model_path, rows, Path(tmp), prompts_per_call=1, name="omni-rl, generate per prompt",
            )
    load_after = os.getloadavg()
    if our_prompts != peer_prompts:
        raise AssertionError("The two sides tokenized the prompts differently.")
    if ours.trainable != theirs.trainable:
        raise AssertionError(f"Trainable parameters differ: ours {ours.trainable}, peer {theirs.trainable}.")
    if max(len(ids) for ids in our_prompts) > setup.max_prompt_length:
        raise AssertionError("A prompt is over max_prompt_length; TRL would not filter it.")
    expected = setup.steps * setup.samples_per_step * setup.max_response_length
    if not ours.tokens == theirs.tokens == expected:
        raise AssertionError(f"Generated tokens differ: ours {ours.tokens}, peer {theirs.tokens}, expected {expected}.")

    tuned = f"LoRA r={setup.lora_rank} on q/k/v/o" if setup.lora_rank else "full fine-tune"
    print(
        f"\n{setup.modality} prompts: {setup.prompts_per_step} x n={setup.n} per step, prompts <= "
        f"{max(len(i) for i in our_prompts)} tokens, {setup.max_response_length} new tokens each, micro-batch "
        f"{setup.micro_batch}, {tuned} ({ours.trainable} trainable), GSPO, lr {setup.lr}, fp32 CPU, torch threads "
        f"{torch.get_num_threads()}, 1 warm-up + {setup.steps} timed steps, load average {load_before[0]:.1f} -> "
        f"{load_after[0]:.1f}"
    )
    if setup.modality != "text":
        print("TRL's GRPOTrainer cannot train Qwen3-Omni on image+audio prompts: " + " ".join(TRL_MULTIMODAL_GAPS))
    print(f"{'side':<32}{'steps/s':>9}{'tokens/s':>10}{'tokens':>8}{'time (s)':>10}{'mean reward':>13}{'last step':>11}")
    for side in (ours, theirs):
        mean_reward = sum(side.rewards) / len(side.rewards)
        print(
            f"{side.name:<32}{side.steps_per_s():>9.3f}{side.tokens_per_s():>10.0f}{side.tokens:>8}"
            f"{side.seconds:>10.1f}{mean_reward:>13.3f}{side.rewards[-1]:>11.3f}"
        )
    ratio = ours.steps_per_s() / theirs.steps_per_s()
    out = args.out or Path("outputs/benchmarks") / f"trainer-{setup.modality.replace('+', '-')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "trainer", "setup": asdict(setup), "ours": ours.raw(), "peer": theirs.raw(),
        "ratio_steps_per_s": ratio, "ratio_tokens_per_s": ours.tokens_per_s() / theirs.tokens_per_s(),
        "load_average_before": load_before, "load_average_after": load_after, "cpus": os.cpu_count(),
        "machine": platform.platform(), "versions": {p: version(p) for p in ("torch", "transformers", "peft", "trl")},
    }, indent=1))
    print(f"raw numbers: {out}")
    print(
        f"ratio ours/{'TRL' if setup.modality == 'text' else 'per-prompt generate'}: steps/s {ratio:.2f}x, "
        f"tokens/s {ours.tokens_per_s() / theirs.tokens_per_s():.2f}x"
    )


if __name__ == "__main__":
    main()
