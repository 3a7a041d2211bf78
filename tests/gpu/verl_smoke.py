"""GPU smoke of the verl engine on the tiny Qwen3-Omni, one GPU, three phases:

1. 3 GSPO steps, colocated: verl (FSDP2 actor, our engine hook) and vLLM-Omni (our replica,
   sleep/wake between steps) share the GPU. Prints per step: step time, rollout<->actor
   log-prob pearson, log_ppl_diff and peak GPU memory, then checks them.
2. 2 steps of on-policy distillation: student = `trainer model noise` of the tiny model
   (25%), teacher = the tiny model served by our vLLM-Omni replica as verl's teacher
   (prompt log-probs of the student's samples). verl gives the teacher a GPU pool of its
   own, so Ray is told there are 2 GPUs while the workers' runtime env names the one
   device: Ray maps a GPU slot beyond the worker's CUDA_VISIBLE_DEVICES back to the
   devices listed there, so both pools land on it. Prints verl's distillation/* metrics
   per step and checks them.
3. 2 GSPO steps on image+audio prompts (AVQA-shaped rows, a generated picture and tone per
   row): the media must reach vLLM-Omni and verl's actor alike, so pearson and log_ppl_diff
   are held to the same bounds as text.

Data: a tiny synthetic gsm8k, converted by `trainer convert gsm8k`, and generated
image+audio rows; nothing is downloaded.

4. (opt-in, ``VERL_SMOKE_PHASES=talker``) 2 steps of talker RL on a real Qwen3-Omni checkpoint
   named by ``$OMNI_RL_QWEN3_OMNI_CKPT`` (vLLM-Omni's talker mode cannot run on the tiny model):
   vLLM-Omni's talker mode against verl's actor, held to the same bounds. Not yet run.

5. (opt-in, ``VERL_SMOKE_PHASES=async``, two GPUs) 3 GSPO steps under verl's one-step-off
   trainer (``async_training.max_staleness=1``): the FSDP actor on one GPU, a vLLM-Omni replica
   on a pool of its own on the other, NCCL weight sync after every update, bypass mode. Checks
   the steps ran, the weights synced every step, and step 1 trained on-policy (its PPO KL
   against the bf16 rollout's log-probs is small). Not yet run.

6. (opt-in, ``VERL_SMOKE_PHASES=fully-async``, two GPUs) 3 GSPO steps under verl's fully-async
   trainer (``async_training.max_staleness=2``) on the same placement, with partial rollout:
   each weight sync aborts the replica's running requests and resumes them with the new
   weights. Checks the steps ran, step 1 trained on-policy, and every step's samples lag the
   actor by at most 2 updates (``async/staleness_max``). Not yet run.

Usage (from tests/gpu/run_gpu_smoke.sh): python tests/gpu/verl_smoke.py [key=value ...] in the
environment the script chose
(the extra overrides go to every phase; ``VERL_SMOKE_PHASES=gspo``, ``=opd``, ``=mm``,
``=talker``, ``=async`` or ``=fully-async`` runs one). Exit code 0 when the phases ran their steps and the metrics are finite
and sane.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEPS = 3
OPD_STEPS = 2
MM_STEPS = 2
WANTED = {
    "step time (s)": "timing_s/step",
    "pearson rollout~actor": "training/rollout_actor_probs_pearson_corr",
    "log_ppl_diff": "log_ppl_diff",
    "peak GPU memory (GB)": "max_memory_allocated_gb",
}
OPD_WANTED = {
    "distillation/loss": "distillation/loss",
    "distillation/abs_loss": "distillation/abs_loss",
    "distillation/loss_max": "distillation/loss_max",
    "pg_loss (task)": "actor/pg_loss",
}
NUMBER = r"(-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))"
TRAINER = [sys.executable, "-m", "omni_trainer.cli"]
"""``trainer`` in this interpreter: the environment run_gpu_smoke.sh chose (uv's, or a plain one)."""


def raw_gsm8k(directory: Path, rows: int = 64) -> None:
    for split in ("train", "test"):
        lines = [{"question": f"Tom has {i} apples and buys {i + 2}. How many now?",
                  "answer": f"{i} + {i + 2} = {2 * i + 2}\n#### {2 * i + 2}"} for i in range(rows)]
        (directory / f"{split}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def image_audio_rows(directory: Path, rows: int = 16) -> tuple[Path, Path]:
    """AVQA-shaped RL parquet files: each prompt has a picture and a tone of its own."""
    import wave

    import numpy as np
    from PIL import Image

    from omni_data import rl_row, write_rl_parquet

    directory.mkdir(parents=True, exist_ok=True)
    files = []
    for split, offset in (("train", 0), ("test", 1000)):
        table = []
        for i in range(rows):
            picture = directory / f"{split}{i}.png"
            Image.fromarray(np.random.default_rng(offset + i).integers(0, 256, (64, 96, 3), dtype=np.uint8)).save(picture)
            tone = directory / f"{split}{i}.wav"
            t = np.arange(16_000) / 16_000
            with wave.open(str(tone), "wb") as handle:
                handle.setnchannels(1)
                handle.setsampwidth(2)
                handle.setframerate(16_000)
                handle.writeframes((0.3 * np.sin(2 * np.pi * (200 + 20 * i) * t) * 32767).astype(np.int16).tobytes())
            table.append(rl_row(
                data_source="avqa_r1_6k", ability="audio_visual",
                messages=[{"role": "user", "content": "<image><audio>What makes the sound? A. a dog B. a bell "
                           "C. rain D. a car. Answer with <answer>letter</answer>."}],
                ground_truth="B", extra_info={"split": split, "index": i},
                images=[str(picture)], audios=[str(tone)],
            ))
        files.append(write_rl_parquet(table, directory / f"{split}.parquet"))
    return files[0], files[1]


def parse_steps(log: str) -> dict[int, dict[str, float]]:
    """verl's console logger prints ``step:N - key:value - key:value ...`` per step."""
    steps: dict[int, dict[str, float]] = {}
    for line in log.splitlines():
        match = re.search(r"step:(\d+) - (.*)", line)
        if not match:
            continue
        pairs = re.findall(r"([\w/@.\-]+):" + NUMBER, match.group(2))
        steps[int(match.group(1))] = {key: float(value) for key, value in pairs}
    return steps


def pick(metrics: dict[str, float], suffix: str) -> float | None:
    hits = [value for key, value in metrics.items() if key == suffix or key.endswith("/" + suffix)]
    return hits[0] if hits else None


def run_trainer(overrides: list[str], log_path: Path, env: dict[str, str | None] | None = None) -> str | None:
    """Run ``trainer`` with ``overrides`` in ``os.environ`` updated by ``env`` (a ``None``
    value removes the variable); its stdout, or None (tail printed) when it failed."""
    started = time.perf_counter()
    environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    done = subprocess.run(
        [*TRAINER, *overrides], capture_output=True, text=True, check=False,
        env={key: value for key, value in environment.items() if value is not None},
    )
    log = done.stdout + done.stderr
    log_path.write_text(log)
    print(f"trainer exited {done.returncode} after {time.perf_counter() - started:.0f} s; log: {log_path}")
    if done.returncode != 0:
        print(log[-8000:])
        return None
    return done.stdout


def training_steps(stdout: str, count: int, problems: list[str]) -> dict[int, dict[str, float]]:
    """Training steps only (validation before training logs as step 0 without a step time)."""
    steps = {n: m for n, m in parse_steps(stdout).items() if pick(m, "timing_s/step") is not None}
    if sorted(steps) != list(range(1, count + 1)):
        problems.append(f"expected training steps 1..{count} in verl's console log, got {sorted(steps)}")
    return steps


def print_table(steps: dict[int, dict[str, float]], wanted: dict[str, str], problems: list[str]) -> None:
    print(f"{'step':>4} | " + " | ".join(f"{name:>22}" for name in wanted))
    for step, metrics in sorted(steps.items()):
        values = {name: pick(metrics, key) for name, key in wanted.items()}
        print(f"{step:>4} | " + " | ".join(f"{'missing' if v is None else f'{v:.4f}':>22}" for v in values.values()))
        for name, value in values.items():
            if value is None or not math.isfinite(value):
                problems.append(f"step {step}: {name} is {value}")


def phase_steps(
    label: str, overrides: list[str], log_path: Path, count: int, wanted: dict[str, str], problems: list[str],
    env: dict[str, str | None] | None = None,
) -> dict[int, dict[str, float]] | None:
    """Run the trainer for one phase, print its steps' ``wanted`` metrics; None when it failed."""
    stdout = run_trainer(overrides, log_path, env)
    if stdout is None:
        problems.append(f"{label}: the trainer failed")
        return None
    steps = training_steps(stdout, count, problems)
    print_table(steps, wanted, problems)
    return steps


def gspo_phase(
    base: list[str], extra: list[str], model: Path, work: Path, problems: list[str], *, steps_wanted: int = STEPS,
    name: str = "run",
) -> None:
    stdout = run_trainer(
        [*base, f"actor_rollout_ref.model.path={model}", f"trainer.total_training_steps={steps_wanted}",
         f"trainer.default_local_dir={work / name}", *extra],
        work / f"trainer_{name}.log",
    )
    if stdout is None:
        problems.append(f"GSPO phase ({name}): the trainer failed")
        return
    steps = training_steps(stdout, steps_wanted, problems)
    print_table(steps, WANTED, problems)
    check_agreement(steps, problems)


def check_agreement(steps: dict[int, dict[str, float]], problems: list[str], label: str = "step") -> None:
    """bf16 rollout vs fp32-master FSDP actor: loose bounds that still catch a broken weight
    sync (pearson ~0) or misaligned log-probs."""
    for step, metrics in sorted(steps.items()):
        pearson, diff = pick(metrics, WANTED["pearson rollout~actor"]), pick(metrics, WANTED["log_ppl_diff"])
        if pearson is not None and pearson < 0.9:
            problems.append(f"{label} {step}: pearson {pearson:.4f} < 0.9 (rollout and actor disagree)")
        if diff is not None and abs(diff) > 0.1:
            problems.append(f"{label} {step}: |log_ppl_diff| {abs(diff):.4f} > 0.1")


def distillation_phase(base: list[str], extra: list[str], teacher: Path, work: Path, problems: list[str]) -> None:
    student = work / "student"
    noised = subprocess.run(
        [*TRAINER, "model", "noise", "--src", str(teacher), "--out", str(student),
         "--fraction", "0.25", "--seed", "0"], capture_output=True, text=True, check=False,
    )
    print(noised.stdout.strip() or noised.stderr[-2000:])
    if noised.returncode != 0:
        problems.append("distillation phase: `trainer model noise` failed")
        return
    # Ray refuses num_gpus beyond the driver's CUDA_VISIBLE_DEVICES, so the driver runs
    # without it and the workers get it from the runtime env; Ray then maps the teacher's
    # GPU slot 1 to this one device (see ray._private.worker, get_accelerator_ids_for_...).
    device = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    stdout = run_trainer(
        [*base, f"actor_rollout_ref.model.path={student}", f"trainer.total_training_steps={OPD_STEPS}",
         f"trainer.default_local_dir={work / 'run_opd'}",
         "distillation.enabled=true", f"distillation.teacher_models.teacher_model.model_path={teacher}",
         "distillation.distillation_loss.loss_mode=kl", "distillation.distillation_loss.use_policy_gradient=true",
         "distillation.nnodes=1", "distillation.n_gpus_per_node=1",
         "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=1",
         "distillation.teacher_models.teacher_model.inference.gpu_memory_utilization=0.2",
         "ray_kwargs.ray_init.num_gpus=2", f"ray_kwargs.ray_init.runtime_env.env_vars.CUDA_VISIBLE_DEVICES='{device}'", *extra],
        work / "trainer_opd.log", env={"CUDA_VISIBLE_DEVICES": None},
    )
    if stdout is None:
        problems.append("distillation phase: the trainer failed")
        return
    steps = training_steps(stdout, OPD_STEPS, problems)
    print_table(steps, OPD_WANTED, problems)
    for step, metrics in sorted(steps.items()):
        # k1 on the student's own samples: |log p_student - log p_teacher| is 0 only if the
        # teacher returned the student's numbers (or nothing); 25% noise makes it positive.
        abs_loss = pick(metrics, OPD_WANTED["distillation/abs_loss"])
        if abs_loss is not None and not abs_loss > 0:
            problems.append(f"step {step}: distillation/abs_loss {abs_loss} is not > 0 (teacher == student?)")


TALKER_STEPS = 2
TALKER_CHECKPOINT_ENV = "OMNI_RL_QWEN3_OMNI_CKPT"
TALKER_WANTED = {**WANTED, "score (audio reward)": "critic/score/mean"}


def talker_phase(base: list[str], extra: list[str], work: Path, problems: list[str]) -> None:
    """Talker RL on a real Qwen3-Omni checkpoint (``$OMNI_RL_QWEN3_OMNI_CKPT``): vLLM-Omni 0.28
    counts the talker's prefill with the real checkpoint's token ids, so the tiny model cannot
    run its talker mode. Text prompts; the talker speaks the thinker's answers; the duration
    reward. Checks the steps ran with sane rollout<->actor agreement and a finite reward."""
    from omni_data.schema import rl_row, write_rl_parquet

    checkpoint = os.environ.get(TALKER_CHECKPOINT_ENV)
    if not checkpoint:
        problems.append(f"talker phase: set {TALKER_CHECKPOINT_ENV} to a local Qwen3-Omni checkpoint")
        return
    rows = [rl_row(data_source="smoke/speech", messages=[{"role": "user", "content": f"Count from one to {n}."}],
                   ground_truth="", ability="speech", extra_info={"index": n}) for n in range(2, 18)]
    train = write_rl_parquet(rows, work / "speech.parquet")
    talker_base = [o for o in base if not o.startswith(("data.train_files", "data.val_files", "data.max_response"))]
    steps = phase_steps(
        "talker phase",
        [*talker_base, f"actor_rollout_ref.model.path={checkpoint}", f"data.train_files=[{train}]",
         "actor_rollout_ref.model.stage=talker", "actor_rollout_ref.rollout.pipeline_mode=talker",
         "data.spoken_text=thinker", "data.max_response_length=256",
         "reward.audio_rewards=[{name: duration, weight: 1.0}]",
         f"trainer.total_training_steps={TALKER_STEPS}", f"trainer.default_local_dir={work / 'run_talker'}", *extra],
        work / "trainer_talker.log", TALKER_STEPS, TALKER_WANTED, problems,
    )
    if steps is not None:
        check_agreement(steps, problems, label="talker step")


ASYNC_STEPS = 3
ASYNC_WANTED = {
    "step time (s)": "timing_s/step",
    "weight sync (s)": "timing_s/sync_rollout_weights",
    "waited for batch (s)": "timing_s/gen",
    "ppo_kl (vs rollout)": "actor/ppo_kl",
    "pg_clipfrac": "actor/pg_clipfrac",
}


def one_step_off_phase(base: list[str], extra: list[str], model: Path, work: Path, problems: list[str]) -> None:
    """verl's one-step-off trainer on two GPUs: trainer pool and rollout pool one GPU each."""
    steps = phase_steps(
        "one-step-off phase",
        [*base, f"actor_rollout_ref.model.path={model}", f"trainer.total_training_steps={ASYNC_STEPS}",
         f"trainer.default_local_dir={work / 'run_async'}", "async_training.max_staleness=1",
         "algorithm.rollout_correction.bypass_mode=true", "rollout.nnodes=1", "rollout.n_gpus_per_node=1",
         "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl", *extra],
        work / "trainer_async.log", ASYNC_STEPS, ASYNC_WANTED, problems,
    )
    if steps is None:
        return
    first = steps.get(1, {})
    kl = pick(first, ASYNC_WANTED["ppo_kl (vs rollout)"])
    # Step 1 trains on the initial weights' samples: only the bf16 rollout's numerics separate them.
    if kl is not None and abs(kl) > 0.05:
        problems.append(f"one-step-off step 1: |ppo_kl| {abs(kl):.4f} > 0.05 (the rollout's log-probs are not the actor's)")


FULLY_ASYNC_WANTED = {
    "step time (s)": "timing_s/step",
    "waited for samples (s)": "timing_s/gen",
    "ppo_kl (vs rollout)": "actor/ppo_kl",
    "staleness max": "async/staleness_max",
    "resumed responses": "fully_async/partial/total_partial_num",
}


def fully_async_phase(base: list[str], extra: list[str], model: Path, work: Path, problems: list[str]) -> None:
    """verl's fully-async trainer on two GPUs, partial rollout on: samples stream from the replica
    on the second GPU while the actor trains on the first."""
    steps = phase_steps(
        "fully-async phase",
        [*base, f"actor_rollout_ref.model.path={model}", f"trainer.total_training_steps={ASYNC_STEPS}",
         f"trainer.default_local_dir={work / 'run_fully_async'}", "async_training.max_staleness=2",
         "async_training.partial_rollout=true", "algorithm.rollout_correction.bypass_mode=true", "rollout.nnodes=1",
         "rollout.n_gpus_per_node=1", "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl", *extra],
        work / "trainer_fully_async.log", ASYNC_STEPS, FULLY_ASYNC_WANTED, problems,
    )
    if steps is None:
        return
    kl = pick(steps.get(1, {}), FULLY_ASYNC_WANTED["ppo_kl (vs rollout)"])
    if kl is not None and abs(kl) > 0.05:
        problems.append(f"fully-async step 1: |ppo_kl| {abs(kl):.4f} > 0.05 (the rollout's log-probs are not the actor's)")
    for step, metrics in sorted(steps.items()):
        lag = pick(metrics, FULLY_ASYNC_WANTED["staleness max"])
        if lag is None or lag > 2:
            problems.append(f"fully-async step {step}: async/staleness_max is {lag} (bound 2)")


def main(extra: list[str]) -> int:
    from omni_data.convert.cli import main as convert
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    work = Path(tempfile.mkdtemp(prefix="verl_smoke_"))
    model = build_tiny_qwen3_omni(work / "tiny")
    (work / "raw").mkdir()
    raw_gsm8k(work / "raw")
    assert convert(["gsm8k", "--input", str(work / "raw"), "--output-dir", str(work / "data")]) == 0
    base = [
        "trainer.engine=verl",
        f"data.train_files=[{work / 'data' / 'train.parquet'}]", f"data.val_files=[{work / 'data' / 'test.parquet'}]",
        "data.train_batch_size=8", "data.val_batch_size=8", "data.max_prompt_length=256", "data.max_response_length=32",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3", "actor_rollout_ref.rollout.enforce_eager=true",
        "actor_rollout_ref.rollout.max_num_seqs=64",
        "trainer.nnodes=1", "trainer.n_gpus_per_node=1", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "trainer.save_freq=0", "trainer.test_freq=0", "trainer.logger=[console]",
        "ray_kwargs.ray_init.num_cpus=8",
    ]
    problems: list[str] = []
    phases = os.environ.get("VERL_SMOKE_PHASES", "gspo,opd,mm").split(",")
    unknown = sorted(set(phases) - {"gspo", "opd", "mm", "talker", "async", "fully-async"})
    if unknown:
        print(f"VERL_SMOKE_PHASES has {unknown}; valid: gspo, opd, mm, talker, async, fully-async (comma-separated)")
        return 2
    if "gspo" in phases:
        print("== phase 1: GSPO ==")
        gspo_phase(base, extra, model, work, problems)
    if "opd" in phases:
        print("== phase 2: on-policy distillation ==")
        distillation_phase(base, extra, model, work, problems)
    if "mm" in phases:
        print("== phase 3: GSPO on image+audio prompts ==")
        train, test = image_audio_rows(work / "mm")
        mm_base = [*(o for o in base if not o.startswith(("data.train_files", "data.val_files", "data.max_prompt"))),
                   f"data.train_files=[{train}]", f"data.val_files=[{test}]", "data.max_prompt_length=512"]
        gspo_phase(mm_base, extra, model, work, problems, steps_wanted=MM_STEPS, name="run_mm")
    if "talker" in phases:
        print("== phase 4: talker RL (a real checkpoint) ==")
        talker_phase(base, extra, work, problems)
    if "async" in phases:
        print("== phase 5: one-step-off asynchronous rollout (two GPUs) ==")
        one_step_off_phase(base, extra, model, work, problems)
    if "fully-async" in phases:
        print("== phase 6: fully-async rollout, partial rollout (two GPUs) ==")
        fully_async_phase(base, extra, model, work, problems)
    for problem in problems:
        print("FAIL:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
