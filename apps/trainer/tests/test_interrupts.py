"""Ctrl-C: the flag, uv's duplicate signal, and reward workers that survive a terminal's SIGINT."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
    stop.handle()
    assert stop.requested
    clock.now += REPEAT_WINDOW_S / 10  # uv forwards the same SIGINT the process group got
    stop.handle()  # before: KeyboardInterrupt, exiting without saving
    clock.now += REPEAT_WINDOW_S
    with pytest.raises(KeyboardInterrupt):
        stop.handle()  # a deliberate second Ctrl-C quits at once


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
