"""One run at a time per run directory: a second run is refused, naming the holder's pid,
before it touches anything; the lock dies with its holder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from omni_trainer.cli import main
from omni_trainer.run_lock import LOCK_NAME, RunDirBusyError, RunDirLock

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from omni_trainer.run_lock import RunDirLock

    with RunDirLock(Path(sys.argv[1])):
        print("locked", flush=True)
        if sys.argv[2] == "crash":
            import os, signal
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(600)
""")


def hold(run: Path, how: str = "hold") -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-u", "-c", HOLDER, str(run), how], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline() == "locked\n"
    return process


@pytest.fixture
def first_run(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A run directory with a run's files, locked by another process (the first run)."""
    run = tmp_path / "run"
    (run / "checkpoints" / "step_000002").mkdir(parents=True)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1.0, "critic/score/mean": 0.25}) + "\n")
    (run / "config.yaml").write_text("first: run\n")
    holder = hold(run)
    yield run, holder
    holder.kill()
    holder.wait()


def snapshot(run: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(run)): (p.read_bytes() if p.is_file() else None) for p in sorted(run.rglob("*"))}


@pytest.mark.parametrize("mode", ["auto", "disable"])
def test_a_second_run_into_a_locked_directory_is_refused_before_it_writes(
    first_run: tuple[Path, subprocess.Popen[str]], mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, the second run (resume_mode=disable) moved the first run's directory aside
    under it, and both wrote metrics.jsonl and checkpoints into the same place."""
    run, holder = first_run
    before = snapshot(run)
    assert main([f"trainer.default_local_dir={run}", f"trainer.resume_mode={mode}"]) == 2
    error = capsys.readouterr().err
    assert f"{run} is in use by another run (pid {holder.pid}" in error, error
    assert "trainer.experiment_name" in error and "Traceback" not in error
    assert snapshot(run) == before  # the first run's logs and checkpoints, byte for byte
    assert not run.with_name("run.previous").exists()
    assert holder.poll() is None  # the first run goes on


def test_the_lock_is_released_when_its_holder_dies(tmp_path: Path) -> None:
    """flock dies with its process: a crashed run never leaves a stale lock behind."""
    run = tmp_path / "run"
    crashed = hold(run, "crash")
    assert crashed.wait(timeout=60) == -signal.SIGKILL
    assert (run / LOCK_NAME).read_text() == f"{crashed.pid}\n"  # its file stays, unlocked
    with RunDirLock(run) as lock:
        assert (run / LOCK_NAME).read_text() == f"{os.getpid()}\n"
        with pytest.raises(RunDirBusyError, match=rf"pid {os.getpid()}\b"):
            RunDirLock(run).acquire()  # even from this process: each acquire opens its own file
        assert lock.path.exists()
    assert not (run / LOCK_NAME).exists()  # a clean release removes it
