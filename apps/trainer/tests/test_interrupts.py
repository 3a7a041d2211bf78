"""Ctrl-C: the flag, uv's duplicate signal, start-up, and reward workers that survive a terminal's SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from omni_trainer.interrupts import REPEAT_WINDOW_S, StopRequest


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_first_interrupt_requests_a_stop_and_the_forwarded_duplicate_is_ignored() -> None:
    clock = Clock()
    stop = StopRequest(clock)
    stop.begin_training()
    stop.handle()
    assert stop.requested
    clock.now += REPEAT_WINDOW_S / 10  # uv forwards the same SIGINT the process group got
    stop.handle()  # before: KeyboardInterrupt, exiting without saving
    clock.now += REPEAT_WINDOW_S
    with pytest.raises(KeyboardInterrupt):
        stop.handle()  # a deliberate second Ctrl-C quits at once


def test_an_interrupt_during_start_up_stops_at_once_and_its_duplicate_is_ignored() -> None:
    """Start-up has nothing to save: before, the first Ctrl-C only set the flag, checked at
    the first step's end, so start-up (model load, scorer imports, validation) ran on."""
    clock = Clock()
    stop = StopRequest(clock)
    with pytest.raises(KeyboardInterrupt):
        stop.handle()
    clock.now += REPEAT_WINDOW_S / 10
    stop.handle()  # uv's forwarded copy arrives while the run unwinds: no second KeyboardInterrupt
    clock.now += REPEAT_WINDOW_S
    with pytest.raises(KeyboardInterrupt):
        stop.handle()


def test_the_handler_is_installed_only_inside_the_block() -> None:
    import signal

    before = signal.getsignal(signal.SIGINT)
    stop = StopRequest()
    with stop.installed():
        assert signal.getsignal(signal.SIGINT) == stop.handle
    assert signal.getsignal(signal.SIGINT) == before


def test_reward_workers_started_by_the_trainer_ignore_sigint() -> None:
    """A terminal sends Ctrl-C to the whole process group; before, the workers died and the
    step was scored (and trained) with every sample an error scoring 0."""
    script = textwrap.dedent("""
        import os, signal, time
        from omni_rewards import RewardManager, RewardManagerConfig
        from omni_trainer.interrupts import workers_ignore_sigint

        if __name__ == "__main__":
            manager = RewardManager(RewardManagerConfig(num_workers=2))
            with workers_ignore_sigint():
                manager.launch()  # as the trainer does: only the processes' creation ignores SIGINT
            manager.start()
            for worker in manager._pool._workers:
                os.kill(worker.process.pid, signal.SIGINT)
            for worker in manager._pool._workers:
                worker.process.join(timeout=1)
            result = manager.score_batch(["openai/gsm8k"], ["#### 4"], ["4"])
            print("statuses", [o.status for o in result.outcomes])
            manager.close()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert "statuses ['ok']" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_ctrl_c_while_the_reward_workers_import_stops_at_once(tmp_path: Path, start_method: str) -> None:
    """Before, SIGINT was ignored for the whole start of the reward workers (their imports:
    3.5 s on a laptop, minutes on a busy machine), and a Ctrl-C then was lost. Here the
    workers' import takes 10 minutes; the process must exit long before it would end."""
    # Imports for 10 minutes, or until the pool's owner is gone (a worker forked while the owner
    # was being interrupted is never its child: it must not outlive the test either).
    (tmp_path / "slow_scorer_module.py").write_text(textwrap.dedent("""
        import os, time

        def owner_alive(pid=int(os.environ["SLOW_IMPORT_OWNER"])):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            return True

        deadline = time.monotonic() + 600
        while owner_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
    """))
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(tmp_path)!r})
        os.environ["SLOW_IMPORT_OWNER"] = str(os.getpid())
        from omni_rewards.pool import TimedWorkerPool
        from omni_trainer.interrupts import StopRequest, workers_ignore_sigint

        if __name__ == "__main__":
            pool = TimedWorkerPool(1, start_method={start_method!r}, preload=("slow_scorer_module",))
            stop = StopRequest()
            with stop.installed():
                with workers_ignore_sigint():
                    pool.launch()
                try:
                    # Inside the try: the test's SIGINT follows this line at once, and Python
                    # may run the handler before the next statement.
                    print("importing", flush=True)
                    pool.start()
                except KeyboardInterrupt:
                    pool.close()
                    print("stopped during start-up", flush=True)
                    sys.exit(130)
            print("started", flush=True)
    """)
    process = subprocess.Popen([sys.executable, "-u", "-c", script], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if line == "importing\n":
            break
    os.killpg(process.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole process group
    try:
        code = process.wait(timeout=120)  # the import would end after 600 s
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    output = "".join(seen) + process.stdout.read()  # EOF once the fork server has followed its parent out
    assert code == 130 and "stopped during start-up" in output, output


@pytest.mark.slow
def test_ctrl_c_during_the_trainers_start_up_stops_it_before_any_step(tmp_path: Path) -> None:
    """The trainer, Ctrl-C'd (delivered twice, as uv forwards it) while its scorer processes
    start: it exits 130 with nothing trained. Before, the Ctrl-C was lost there and the run
    trained on to its end."""
    run = tmp_path / "run"
    short = ["data.builtin_task_size=8", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2",
             "actor_rollout_ref.actor.ppo_mini_batch_size=2", "data.max_response_length=2", "reward.num_workers=1",
             "trainer.total_training_steps=4", f"trainer.default_local_dir={run}"]
    env = {**os.environ, "OMNI_RL_CACHE": str(tmp_path / "cache")}
    process = subprocess.Popen([sys.executable, "-u", "-m", "omni_trainer.cli", *short], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env)
    assert process.stdout is not None
    seen = []
    try:
        for line in process.stdout:
            seen.append(line)
            if line.startswith("reward: starting the scorer processes"):
                os.killpg(process.pid, signal.SIGINT)
                os.killpg(process.pid, signal.SIGINT)
                break
        output = "".join(seen) + process.stdout.read()
        code = process.wait(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert code == 130, output
    assert "interrupted during start-up: stopped; nothing was trained" in output and "Traceback" not in output, output
    assert "step    1/4" not in output and not (run / "checkpoints").exists()
    assert not (run / ".lock").exists()  # released on the way out
