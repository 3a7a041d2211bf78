"""Offline DPO on the verl engine, on the CPU: ``uv run trainer`` in a process of its own.

verl's actor workers on two gloo ranks under Ray, with no rollout and no reward workers:
- its FSDP2 engine with our module;
- its ``update_actor`` and ``compute_log_prob``;
- its reference worker (full fine-tuning) or the adapter-disabled base (LoRA);
- its checkpoints.

The test runs the same pairs through the local engine and requires the same step. LoRA on
verl (its adapter-disabled base as the reference) and a resumed launch are run by
``tests/test_examples.py::test_dpo_recipe_on_verl_starts_at_its_reference_and_resumes``, through
the example script. Metrics are read from the run directory's ``metrics.jsonl``, as a user reads them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

RUN_ENV = {**os.environ, "RAY_DEDUP_LOGS": "0", "OMNI_RL_VERL_LOG": "console"}  # the workers' output is read


@pytest.fixture(scope="module")
def inputs() -> tuple[str, str, str]:
    from omni_qwen3.tiny import build_tiny_qwen3_omni
    from omni_trainer.builtin_files import builtin_preference_files
    from omni_trainer.config import load_config

    (train,), (val,) = builtin_preference_files(load_config(["algorithm.sample_source=offline"]))
    return str(build_tiny_qwen3_omni()), train, val


def run_trainer(inputs: tuple[str, str, str], run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    tiny, train, val = inputs
    command = [
        sys.executable, "-m", "omni_trainer.cli", "algorithm.sample_source=offline",
        f"actor_rollout_ref.model.path={tiny}", f"data.train_files=[{train}]", f"data.val_files=[{val}]",
        "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "data.val_max_samples=4",
        "trainer.total_training_steps=2", "trainer.save_freq=2", "trainer.test_freq=2",
        f"trainer.default_local_dir={run_dir}", *extra,
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=RUN_ENV, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-6000:]
    return done


def steps(run_dir: Path) -> dict[float, dict[str, Any]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row for row in rows}


VERL_CPU = ("trainer.engine=verl", "trainer.device=cpu", "trainer.n_gpus_per_node=2")
CLOSE = {  # absolute bounds, about 30x the differences measured between the engines (fp32 throughout)
    "loss": 3e-6, "rewards/chosen": 3e-6, "rewards/rejected": 3e-6, "rewards/margins": 3e-6, "logps/chosen": 3e-4,
    "logps/rejected": 3e-4, "val/dpo_loss": 3e-6, "val/reward_margin": 1e-5, "val/chosen_rewards": 3e-6,
}


def test_offline_dpo_on_verl_steps_as_the_local_engine_does(tmp_path: Path, inputs: tuple[str, str, str]) -> None:
    """Full fine-tuning (verl's reference worker), two updates a step, one pair a micro-batch,
    split over two ranks: each step's loss, rewards, log-probs and gradient norm are the local
    engine's on the same pairs, and so is the validation after training."""
    same = ("actor_rollout_ref.model.lora_rank=0", "actor_rollout_ref.actor.ppo_mini_batch_size=2")
    verl_dir, local_dir = tmp_path / "verl", tmp_path / "local"
    done = run_trainer(inputs, verl_dir, *VERL_CPU, *same)
    run_trainer(inputs, local_dir, "trainer.engine=local", *same)
    verl, local = steps(verl_dir), steps(local_dir)
    assert {1.0, 2.0} <= set(verl) and {1.0, 2.0} <= set(local)
    for step in (1.0, 2.0):
        ours, theirs = verl[step], local[step]
        modality = [k.split("/")[0] for k in theirs if k.endswith("/rewards/accuracies")]
        assert len(modality) == 1 and f"{modality[0]}/rewards/accuracies" in ours  # the same pairs
        assert ours["rewards/accuracies"] == theirs["rewards/accuracies"]
        for key, bound in CLOSE.items():
            if key in theirs:
                assert abs(ours[key] - theirs[key]) <= bound, (step, key, ours[key], theirs[key])
        assert ours["actor/grad_norm"] == pytest.approx(theirs["actor/grad_norm"], rel=3e-4)
        assert ours["actor/loss"] == pytest.approx(ours["loss"], abs=1e-6)  # verl's own sum of our loss
    assert verl[2.0]["rewards/margins"] != 0  # the update moved the policy off its reference
    assert verl[2.0]["val/num_samples"] == 4 and verl[2.0]["val/reward_accuracy"] == local[2.0]["val/reward_accuracy"]
    assert (verl_dir / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert (verl_dir / "global_step_2" / "actor").is_dir() and (verl_dir / "curve.png").is_file()
    assert "step    2/2 | loss" in done.stdout and "pref acc" in done.stdout
    summary = (verl_dir / "summary.txt").read_text()
    assert "preference accuracy by step: " in summary and "val/reward_accuracy" in summary



def test_the_readmes_dpo_line_trains_the_built_in_pairs_on_verl(tmp_path: Path, inputs: tuple[str, str, str]) -> None:
    """``uv run trainer algorithm.sample_source=offline trainer.engine=verl trainer.device=cpu``
    (one step here): the embedded default gives verl the built-in pairs as files. It gave the RL
    task's file, and the run stopped with "lacks preference columns"."""
    command = [sys.executable, "-m", "omni_trainer.cli", "algorithm.sample_source=offline", "trainer.engine=verl",
               "trainer.device=cpu", "trainer.total_training_steps=1", f"trainer.default_local_dir={tmp_path / 'run'}"]
    done = subprocess.run(command, capture_output=True, text=True, env=RUN_ENV, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-6000:]
    assert f"built-in preference pairs: {Path(inputs[1]).parent}" in done.stderr
    assert "preference dataset: read" in done.stdout
    assert sorted(steps(tmp_path / "run")) == [1.0] and "rewards/accuracies" in steps(tmp_path / "run")[1.0]
