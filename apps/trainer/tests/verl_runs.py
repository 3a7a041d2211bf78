"""What the whole-run tests of the verl engine share: a launch killed once it is far enough,
and the steps each launch recorded in verl's ``file`` logger."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
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
