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
    assert main([*SHORT, f"trainer.default_local_dir={run}", "trainer.total_training_steps=2"]) == 0
    first = capsys.readouterr().out
    assert "step    2/2" in first and f"run directory: {run.resolve()}" in first
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1.0, 2.0]
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "rollout/tokens_per_s", "timing_s/step",
                "training/rollout_actor_probs_pearson_corr", "rollout_corr/log_ppl_diff", "reward/timeouts"):
        assert all(isinstance(row[key], float) and math.isfinite(row[key]) for row in rows), key
    assert rows[-1]["training/rollout_actor_probs_pearson_corr"] > 0.99
    assert (run / "curve.png").stat().st_size > 0 and (run / "config.yaml").exists()
    assert (run / "checkpoints" / "step_000002" / "adapter" / "adapter_config.json").exists()

    # The same command with a longer horizon continues from the checkpoint.
    assert main([*SHORT, f"trainer.default_local_dir={run}", "trainer.total_training_steps=3"]) == 0
    second = capsys.readouterr().out
    assert "resumed from" in second and "step_000002 (step 2)" in second
    assert "step    1/3" not in second and "step    3/3" in second
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1.0, 2.0, 3.0]


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
    rewards = [json.loads(line)["critic/score/mean"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert first < 0.1
    assert last > first + 0.5, rewards
    assert "mean reward: first 5 steps" in capsys.readouterr().out
