"""The timed worker pool on its own: start-up failures and order under kills."""

from __future__ import annotations

from types import ModuleType

import pytest

from omni_rewards import RewardWorkerError
from omni_rewards.pool import TimedWorkerPool


def test_a_worker_that_cannot_start_explains_what_to_check() -> None:
    pool = TimedWorkerPool(1, start_method="fork", preload=("omni_rewards_no_such_module",))
    try:
        with pytest.raises(RewardWorkerError) as raised:
            pool.start()
    finally:
        pool.close()
    message = str(raised.value)
    assert "exited with code 1 before it was ready" in message
    assert "omni_rewards_no_such_module" in message
    assert "if __name__ == '__main__':" in message


def test_outcomes_keep_input_order_across_timeouts(test_scorers: ModuleType) -> None:
    sleep = test_scorers.sleep_then_score
    # 0.0 s tasks around two that overrun a 0.5 s limit; one worker, so the kills requeue
    # the rest of each chunk.
    delays = ["0", "0", "3", "0", "3", "0"]
    pool = TimedWorkerPool(1, start_method="fork")
    try:
        outcomes = pool.run([(sleep, (d, ""), {}) for d in delays], timeout_s=0.5)
    finally:
        pool.close()
    assert [o.status for o in outcomes] == ["ok", "ok", "timeout", "ok", "timeout", "ok"]
    assert [o.value for o in outcomes if o.status == "ok"] == [1.0, 1.0, 1.0, 1.0]


def test_a_worker_whose_owner_is_gone_ends_without_a_traceback() -> None:
    """A run Ctrl-C'd while its workers start (or score) closes their pipes; a worker then ends
    quietly instead of printing a BrokenPipeError (the run's stop message was followed by one)."""
    import functools
    import multiprocessing
    import threading
    import time

    from omni_rewards.pool import _worker_main

    owner, worker = multiprocessing.Pipe(duplex=True)
    owner.close()
    assert _worker_main(worker, (), None) is None  # gone before the worker was ready
    worker.close()

    owner, worker = multiprocessing.Pipe(duplex=True)
    ended: list[BaseException | None] = []

    def run() -> None:
        try:
            _worker_main(worker, (), None)
            ended.append(None)
        except BaseException as exc:  # noqa: BLE001  (the test reports it)
            ended.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert owner.recv() == "ready"
    owner.send([(0, functools.partial(time.sleep, 0.5), (), {})])
    owner.close()  # gone while the task runs: its answer finds nobody to read it
    thread.join(timeout=30)
    assert ended == [None]
    worker.close()


def test_a_ctrl_c_while_a_worker_is_created_arrives_once_it_exists() -> None:
    """Interrupted between the fork server's fork and the parent's message, the child printed
    an EOFError traceback as the run stopped (seen in CI: a Ctrl-C during start-up)."""
    import signal

    from omni_rewards.pool import sigint_deferred

    # Python's own handler, whatever an earlier test's imports left (a CI run found another).
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        reached_the_end = False
        with pytest.raises(KeyboardInterrupt):
            with sigint_deferred():
                signal.raise_signal(signal.SIGINT)
                reached_the_end = True  # the interrupt waits for the block to finish
        assert reached_the_end
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is restored
    finally:
        signal.signal(signal.SIGINT, outer)
