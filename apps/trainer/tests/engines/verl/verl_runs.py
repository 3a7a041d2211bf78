"""What the whole-run tests of the verl engine share: a launch killed once it is far enough,
and the steps each launch recorded in verl's ``file`` logger."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


def launches(run_dir: Path) -> list[list[dict[str, Any]]]:
    """Per launch into ``run_dir`` (oldest first), the steps verl's file logger recorded."""
    runs = []
    for path in sorted((run_dir / "metrics").glob("verl-*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        runs.append([{"step": r["step"], **r["data"]} for r in records if "training/global_step" in r["data"]])
    return runs


def run_and_kill_when(
    command: Sequence[str], log_path: Path, ready: Callable[[], bool], env: Mapping[str, str], *, timeout_s: float = 600
) -> None:
    """Run ``command`` (a ``trainer`` launch) with its output in ``log_path`` until ``ready()``,
    then kill it as a user's Ctrl-\\ or a node failure would: SIGKILL to its process group
    (the driver; Ray ends the actors of its job)."""
    with log_path.open("w") as log:
        run = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=dict(env))
    deadline = time.monotonic() + timeout_s
    try:
        while not ready():
            assert run.poll() is None, f"the run ended before it was ready:\n{tail(log_path)}"
            assert time.monotonic() < deadline, f"not ready within {timeout_s:.0f} s:\n{tail(log_path)}"
            time.sleep(0.5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()


def tail(path: Path, lines: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def vllm_omni_run(model: Path, train: Path, run_dir: Path, *extra: str, steps: int = 3, response_length: int = 4) -> list[str]:
    """The ``trainer`` command of a verl run on the CPU with vLLM-Omni (``extra``: more
    overrides): batches of two rows, two samples each, large never-zero updates (Adam moves
    every weight by about lr; the entropy bonus), so a rollout left on older weights would be
    far off the actor."""
    return [
        sys.executable, "-m", "omni_trainer.cli",
        "trainer.engine=verl", "trainer.device=cpu", "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.rollout.name=vllm_omni",
        f"actor_rollout_ref.model.path={model}", f"data.train_files=[{train}]", "data.shuffle=false",
        "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.n=2",
        f"data.max_response_length={response_length}", "actor_rollout_ref.actor.optim.lr=3e-2",
        "actor_rollout_ref.actor.entropy_coeff=0.01", f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false", f"trainer.default_local_dir={run_dir}", *extra,
    ]
