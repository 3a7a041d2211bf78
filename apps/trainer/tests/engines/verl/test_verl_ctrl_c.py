"""Ctrl-C on the verl engine does what the docs (Running the trainer) and ``--help`` say: the step in progress
finishes, the run saves and exits 0, and the same command resumes it. It used to quit at
once without saving (exit 130).

A terminal's Ctrl-C reaches the whole foreground process group: the ``trainer`` process and
every Ray process it started. The test sends SIGINT to the run's process group the same way,
after verl has logged its first step; the run has 6 steps and saves none on its own
(``trainer.save_freq=0``), so the checkpoint is the stop's.

The same run shows the terminal a user gets (verl's and Ray's own output in ``verl.log``): a
line a step and a few around them. A 3-step CPU run printed about 1,800 lines."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_verl_cpu_run import RUN_ENV, inputs, logged_steps, trainer_command  # noqa: E402,F401  (inputs: a fixture)
from verl_runs import tail  # noqa: E402

pytestmark = pytest.mark.slow


def test_ctrl_c_finishes_the_step_saves_and_exits_0(tmp_path: Path, inputs: tuple[str, Path, Path]) -> None:
    tiny, train, val = inputs
    run_dir = tmp_path / "run"
    command = trainer_command(tiny, train, val, run_dir, "trainer.total_training_steps=6", "trainer.save_freq=0")
    log_path = tmp_path / "run.log"
    terminal_env = {key: value for key, value in RUN_ENV.items() if key != "OMNI_RL_VERL_LOG"}  # the user's console
    with log_path.open("w") as log:
        run = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=terminal_env)
    deadline = time.monotonic() + 600
    try:
        while not logged_steps(run_dir):
            assert run.poll() is None, f"the run ended before its first step:\n{tail(log_path)}"
            assert time.monotonic() < deadline, tail(log_path)
            time.sleep(0.5)
        os.killpg(run.pid, signal.SIGINT)  # Ctrl-C in the terminal
        code = run.wait(timeout=600)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    log = log_path.read_text(errors="replace")
    assert code == 0, tail(log_path)
    assert "interrupt: stopping at the end of this step" in log
    stopped = logged_steps(run_dir)[-1]
    assert 1 <= stopped < 6, log[-3000:]
    assert f"stopped after step {stopped}; checkpoint saved. Run the same command to resume." in log
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text().strip() == str(stopped)
    assert (run_dir / f"global_step_{stopped}" / "actor").is_dir()
    assert not (run_dir / ".stop-requested").exists()

    terminal = log.splitlines()
    summary = (run_dir / "summary.txt").read_text().splitlines()
    during = [line for line in terminal if line.strip() and line not in summary]
    steps = [line for line in during if line.startswith("step ")]
    assert len(steps) == stopped
    # the start (data x2, where the log is), the interrupt's 2 lines, the stop line
    assert len(during) <= len(steps) + 7, "\n".join(during)
    assert not any("UserWarning" in line or "actor_rollout_ref:" in line for line in terminal)
    verl_log = (run_dir / "verl.log").read_text(errors="replace")
    assert "actor_rollout_ref" in verl_log and "UserWarning" in verl_log  # verl's config dump and the workers' warnings
    assert verl_log.count("\n") > 10 * len(terminal)
