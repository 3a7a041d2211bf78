"""The local engine end to end on the embedded default, shortened: outputs, resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from omni_trainer.cli import main


@pytest.fixture
def isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNI_RL_CACHE", str(tmp_path_factory.getbasetemp() / "omni-rl-cache"))


SHORT = [
    "data.builtin_task_size=16", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "data.max_response_length=3", "reward.num_workers=1", "trainer.save_freq=2",
    "actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=200",
]


@pytest.mark.slow
def test_short_run_writes_outputs_and_resumes(tmp_path: Path, isolated_cache: None, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    logged = ["trainer.log_val_generations=3", "trainer.logger=[console,tensorboard]",
              # rollout correction on, as in test_verl_cpu_run's reward-file run: token TIS and k1 rejection
              "algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=2.0",
              "algorithm.rollout_correction.rollout_rs=token_k1", "algorithm.rollout_correction.rollout_rs_threshold=0.5_2.0"]
    assert main([*SHORT, *logged, f"trainer.default_local_dir={run}", "trainer.total_training_steps=2"]) == 0
    first = capsys.readouterr().out
    assert "step    2/2" in first and f"run directory: {run.resolve()}" in first
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0.0, 1.0, 2.0]  # step 0: validation before training
    assert "val-core/omni_rl/builtin_digits/score/mean@4" in rows[0]
    rows = rows[1:]
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "rollout/tokens_per_s", "timing_s/step",
                "training/rollout_actor_probs_pearson_corr", "rollout_corr/log_ppl_diff", "reward/timeouts"):
        assert all(isinstance(row[key], float) and math.isfinite(row[key]) for row in rows), key
    assert rows[-1]["training/rollout_actor_probs_pearson_corr"] > 0.99
    # The actor masks the placeholders the sampler never draws: no log(1 - P(masked)) bias.
    assert all(abs(row["rollout_corr/log_ppl_diff"]) < 1e-4 for row in rows), [r["rollout_corr/log_ppl_diff"] for r in rows]
    # The sampler draws with the actor's own weights: weights of 1 and nothing rejected.
    assert all(abs(row["rollout_corr/rollout_is_mean"] - 1) < 1e-3 and row["rollout_corr/rollout_is_max"] <= 2.0
               and row["rollout_corr/rollout_rs_masked_fraction"] == 0 for row in rows)
    assert (run / "curve.png").stat().st_size > 0 and (run / "config.yaml").exists()
    assert (run / "checkpoints" / "step_000002" / "adapter" / "adapter_config.json").exists()
    # trainer.log_val_generations=3: each validation's samples (before training, then the final
    # one), the same prompts each time.
    generations = {path.name: [json.loads(line) for line in path.read_text().splitlines()]
                   for path in (run / "val_generations").iterdir()}
    assert sorted(generations) == ["step_0.jsonl", "step_2.jsonl"]
    assert [len(rows) for rows in generations.values()] == [3, 3]
    assert [row["step"] for row in generations["step_2.jsonl"]] == [2, 2, 2]
    assert [row["input"] for row in generations["step_0.jsonl"]] == [row["input"] for row in generations["step_2.jsonl"]]
    assert all(row["input"] and row["status"] == "ok" and 0 <= row["score"] <= 1 for row in generations["step_2.jsonl"])

    # The same command with a longer horizon continues from the checkpoint.
    assert main([*SHORT, *logged, f"trainer.default_local_dir={run}", "trainer.total_training_steps=3"]) == 0
    second = capsys.readouterr().out
    assert "resumed from" in second and "step_000002 (step 2)" in second
    assert "step    1/3" not in second and "step    3/3" in second
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0.0, 1.0, 2.0, 3.0]
    assert sorted(path.name for path in (run / "val_generations").iterdir()) == [
        "step_0.jsonl", "step_2.jsonl", "step_3.jsonl"]
    assert tensorboard_steps(run / "tensorboard", "val/generations/text_summary") == [0, 2, 3]  # add_text's tag

    # Once more: nothing to do, and it says so (before: "3 steps in 0 s").
    assert main([*SHORT, *logged, f"trainer.default_local_dir={run}", "trainer.total_training_steps=3"]) == 0
    third = capsys.readouterr().out
    assert "is already complete (3 of 3 steps" in third and "trainer.resume_mode=disable" in third


def tensorboard_steps(directory: Path, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import (  # type: ignore[import-untyped]
        TENSORS,
        EventAccumulator,
    )

    events = EventAccumulator(str(directory), size_guidance={TENSORS: 0})
    events.Reload()
    return sorted(event.step for event in events.Tensors(tag))


@pytest.mark.slow
def test_ctrl_c_saves_the_last_finished_step_and_resumes(tmp_path: Path, isolated_cache: None) -> None:
    """One SIGINT to the process group, delivered twice (as uv forwards it): the run stops at
    a step boundary, never trains on the interrupted step, saves, exits 0; the same command resumes.
    Its output, start-up included, is also checked for silenced library noise."""
    import os
    import signal
    import subprocess
    import sys

    run = tmp_path / "run"
    command = [sys.executable, "-u", "-m", "omni_trainer.cli", *SHORT, f"trainer.default_local_dir={run}",
               "trainer.total_training_steps=40", "trainer.save_freq=-1", "trainer.val_before_train=false"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True, env={**os.environ})
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if line.startswith("step    2/40"):
            os.killpg(process.pid, signal.SIGINT)
            os.killpg(process.pid, signal.SIGINT)
            break
    output = "".join(seen) + process.stdout.read()
    assert process.wait(timeout=300) == 0, output
    assert "stopped after step" in output and "checkpoint saved" in output, output
    # The whole output (stderr too) is free of the library noise omni_trainer.library_noise silences:
    # before, every Qwen3-Omni config load printed this (five times at start-up).
    assert "Unrecognized keys in `rope_parameters`" not in output, output
    rows = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    saved = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert saved == [f"step_{int(rows[-1]):06d}"] and rows == [float(s) for s in range(1, len(rows) + 1)], (saved, rows)
    assert main([*SHORT, f"trainer.default_local_dir={run}", "trainer.total_training_steps=" + str(int(rows[-1]) + 1),
                 "trainer.val_before_train=false"]) == 0


def test_config_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["actor_rollout_ref.rollout.nn=2"]) == 2
    assert "did you mean 'actor_rollout_ref.rollout.n'?" in capsys.readouterr().err


def test_print_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--print-config", "trainer.experiment_name=x"]) == 0
    out = capsys.readouterr().out
    assert "experiment_name: x" in out and "default_local_dir: runs/x" in out


@pytest.mark.slow
def test_embedded_default_learns(tmp_path: Path, isolated_cache: None, capsys: pytest.CaptureFixture[str]) -> None:
    """The embedded default, shortened to 45 steps: the mean reward rises from about 0."""
    run = tmp_path / "default"
    assert main([f"trainer.default_local_dir={run}", "trainer.total_training_steps=45", "trainer.test_freq=0",
                 "trainer.save_freq=0"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rewards = [row["critic/score/mean"] for row in rows if row["step"] > 0]  # step 0: validation only
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert first < 0.1
    assert last > first + 0.5, rewards
    assert "mean reward: first 5 steps" in capsys.readouterr().out


@pytest.mark.slow
def test_the_learning_rate_schedule_counts_training_steps_as_verls(tmp_path: Path) -> None:
    """Two updates a step, verl's ``lr_warmup_steps=-1`` with half the 4 steps warming up: the
    rate is half on step 1 and whole from step 2, on every update of a step (verl's engine steps
    the schedule once a step). Counting updates, step 1's second update already had the whole rate."""
    run = tmp_path / "run"
    assert main([
        "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.optim.lr=0.001", "actor_rollout_ref.actor.optim.lr_warmup_steps=-1",
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.5", "trainer.total_training_steps=4",
        "trainer.test_freq=0", "trainer.save_freq=0", "trainer.val_before_train=false",
        f"trainer.default_local_dir={run}",
    ]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["actor/lr"] for row in rows if row["step"] >= 1] == pytest.approx([5e-4, 1e-3, 1e-3, 1e-3])
