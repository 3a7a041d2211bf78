"""A verl CPU run's terminal: at most one line a step, plus the start and the summary; the rest
(verl's config dump, Ray's worker output, per-process import warnings) in ``verl.log``. A
3-step run printed about 1,800 lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_verl_cpu_run import inputs, trainer_command  # noqa: E402,F401  (inputs: a fixture)

pytestmark = pytest.mark.slow


def test_a_three_step_run_prints_a_line_a_step_and_keeps_the_rest_in_its_log(
    tmp_path: Path, inputs: tuple[str, Path, Path]
) -> None:
    tiny, train, val = inputs
    run_dir = tmp_path / "run"
    env = {key: value for key, value in os.environ.items() if key != "OMNI_RL_VERL_LOG"}
    done = subprocess.run(trainer_command(tiny, train, val, run_dir, "trainer.test_freq=3"), capture_output=True,
                          text=True, env=env, timeout=900, check=False)
    terminal = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 0, "\n".join(terminal[-60:])
    summary = (run_dir / "summary.txt").read_text().splitlines()
    during = [line for line in terminal if line not in summary]
    print(f"terminal: {len(terminal)} lines ({len(during)} before the summary's {len(summary)})")
    steps = [line for line in during if line.startswith("step ")]
    assert [line.split("|")[0].strip() for line in steps] == ["step    1/3", "step    2/3", "step    3/3"]
    assert len(during) <= len(steps) + 6, "\n".join(during)  # the start: model, data, the log's path; validation
    assert not any("UserWarning" in line or "actor_rollout_ref:" in line for line in terminal)
    log = (run_dir / "verl.log").read_text(errors="replace")
    assert "UserWarning" in log and "actor_rollout_ref" in log  # verl's warnings and its config dump, kept
    assert log.count("\n") > 10 * len(terminal)
