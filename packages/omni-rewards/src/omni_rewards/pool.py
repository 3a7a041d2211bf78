"""Worker processes that run tasks under a per-task deadline, killing any that overrun.

Why not ``concurrent.futures``: a process pool cannot stop one running task, and
math-verify's own timeout (``signal.alarm``) only works in a main thread. Here the parent
watches each worker's progress with ``multiprocessing.connection.wait`` (no signals, so it
works from any thread), kills a worker whose current task overruns, reports that task as
timed out, requeues the rest of its chunk and starts a replacement.

Protocol: a worker imports its preload modules and sends ``READY``; then it receives
chunks ``[(index, fn, args, kwargs), ...]`` and answers one ``(index, ok, value_or_error)``
per task, in order; ``None`` asks it to exit. A task that raises ``TimeoutError`` (a judge that
did not answer in time) is a timeout, as one the pool stops; any other exception an error.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import multiprocessing.forkserver
import signal
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Literal

from omni_rewards.errors import RewardWorkerError

StartMethod = Literal["forkserver", "spawn", "fork"]
Task = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]

_READY = "ready"
_MAX_CHUNK = 16
_MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class TaskOutcome:
    """What became of one task: its value, or why there is none."""

    status: Literal["ok", "timeout", "error"]
    value: Any = None
    error: str | None = None


def describe_exception(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."


def _worker_main(
    conn: Connection, preload: tuple[str, ...], initializer: Callable[[], object] | None
) -> None:
    """A worker's loop; it ends quietly when the pool's owner is gone (a run stopped while its
    workers started or scored), instead of printing a broken pipe's traceback."""
    for module in preload:
        importlib.import_module(module)
    if initializer is not None:
        initializer()
    try:
        conn.send(_READY)
    except (BrokenPipeError, ConnectionResetError):
        return
    while True:
        try:
            chunk = conn.recv()
        except EOFError:
            return
        if chunk is None:
            return
        for index, fn, args, kwargs in chunk:
            try:
                message: tuple[int, bool, Any] = (index, True, fn(*args, **kwargs))
            except Exception as exc:
                status = "timeout" if isinstance(exc, TimeoutError) else "error"
                message = (index, False, (status, describe_exception(exc)))
            try:
                conn.send(message)
            except (BrokenPipeError, ConnectionResetError):
                return
            except Exception as exc:  # the result did not pickle; nothing was written yet
                error = f"the result could not be sent back: {describe_exception(exc)}"
                conn.send((index, False, ("error", error)))


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """A Ctrl-C that arrives inside is delivered on the way out (on the main thread; elsewhere
    no signal arrives). Creating a worker must not be cut short: the fork server forks the
    child before this process has sent it what to run, and a child left without it prints
    a traceback (``EOFError`` in ``spawn._main``) as the run stops."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            signal.raise_signal(signal.SIGINT)  # to the handler that was there before


class _Worker:
    def __init__(
        self, context: Any, preload: tuple[str, ...], initializer: Callable[[], object] | None
    ) -> None:
        parent_end, child_end = context.Pipe(duplex=True)
        self.process = context.Process(
            target=_worker_main,
            args=(child_end, preload, initializer),
            name="omni-rewards-worker",
            daemon=True,
        )
        with sigint_deferred():
            self.process.start()
        child_end.close()
        self.conn: Connection = parent_end
        self.ready = False
        self.started_at = time.monotonic()
        self.outstanding: deque[int] = deque()
        self.deadline = float("inf")

    def exit_description(self) -> str:
        self.process.join(timeout=1)
        code = self.process.exitcode
        if code is not None and code < 0:
            return f"was killed by {signal.Signals(-code).name}"
        return f"exited with code {code}"

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()

    def stop(self) -> None:
        if not self.ready:  # still importing: nothing in flight to finish
            self.kill()
            return
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.process.join(timeout=2)
        self.kill()


def _stop_all(workers: list[_Worker]) -> None:
    for worker in workers:
        worker.stop()
    workers.clear()


class TimedWorkerPool:
    """A fixed number of worker processes running tasks with a per-task timeout.

    Args:
        num_workers: worker processes to keep running.
        start_method: multiprocessing start method. ``forkserver`` (default) starts workers
            from a clean server process that has imported ``preload`` once, so a replacement
            for a killed worker is ready in milliseconds; ``spawn`` is the most isolated;
            ``fork`` is fastest to start but unsafe in a parent that runs threads.
        preload: modules each worker imports before it takes work, so import time never
            counts against a task's timeout.
        initializer: a module-level function each worker runs after the imports, before it
            takes work (e.g. a warm-up call that triggers lazy imports).
        startup_timeout_s: how long a new worker may take to become ready.
    """

    def __init__(
        self,
        num_workers: int,
        *,
        start_method: StartMethod = "forkserver",
        preload: Sequence[str] = (),
        initializer: Callable[[], object] | None = None,
        startup_timeout_s: float = 300.0,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}.")
        self.num_workers = num_workers
        self.preload = tuple(preload)
        self.initializer = initializer
        self.startup_timeout_s = startup_timeout_s
        self.start_method = start_method
        self._context = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            # Only takes effect if this process's fork server has not started yet.
            self._context.set_forkserver_preload(list(self.preload))
        self._workers: list[_Worker] = []
        self._finalizer = weakref.finalize(self, _stop_all, self._workers)

    def launch(self) -> None:
        """Create the processes now, without waiting for their imports.

        With ``forkserver`` this starts the fork server (which creates the workers once it
        has imported ``preload``: :meth:`start` waits for that); with ``spawn`` and ``fork``
        it starts the workers. A process created here keeps this process's SIGINT
        disposition: called with SIGINT ignored, every worker ignores it (including those
        the fork server starts later), while the wait in :meth:`start` can be interrupted.
        Called by :meth:`start` when not called before.
        """
        if self.start_method == "forkserver":
            multiprocessing.forkserver.ensure_running()
            return
        while len(self._workers) < self.num_workers:
            self._workers.append(_Worker(self._context, self.preload, self.initializer))

    def start(self) -> None:
        """Start the workers (if needed) and wait until every one is ready."""
        while len(self._workers) < self.num_workers:
            self._workers.append(_Worker(self._context, self.preload, self.initializer))
        while not all(worker.ready for worker in self._workers):
            self._wait_and_collect([], timeout_s=0.0)

    def close(self) -> None:
        """Ask the workers to exit, killing any that do not."""
        _stop_all(self._workers)

    def run(self, tasks: Sequence[Task], timeout_s: float) -> list[TaskOutcome]:
        """Run ``tasks`` in parallel; each may run ``timeout_s`` seconds before it is killed.

        Returns one outcome per task, in order. Raises only when workers cannot be started;
        on any exception (including KeyboardInterrupt) the workers are killed first.
        """
        outcomes: list[TaskOutcome | None] = [None] * len(tasks)
        try:
            self.start()
            queue = deque(range(len(tasks)))
            while queue or any(worker.outstanding for worker in self._workers):
                self._dispatch(tasks, queue, outcomes, timeout_s)
                self._wait_and_collect(outcomes, timeout_s, queue)
        except BaseException:
            for worker in self._workers:
                worker.kill()
            self._workers.clear()
            raise
        missing = [i for i, outcome in enumerate(outcomes) if outcome is None]
        if missing:
            raise RewardWorkerError(
                f"Internal error: tasks {missing[:10]} finished without an outcome."
            )
        return [outcome for outcome in outcomes if outcome is not None]

    def _dispatch(
        self,
        tasks: Sequence[Task],
        queue: deque[int],
        outcomes: list[TaskOutcome | None],
        timeout_s: float,
    ) -> None:
        idle = [w for w in self._workers if w.ready and not w.outstanding]
        for worker in idle:
            # Loops again only when nothing in the chunk could be sent.
            while queue and not worker.outstanding:
                self._send_chunk(worker, tasks, queue, outcomes, timeout_s)

    def _send_chunk(
        self,
        worker: _Worker,
        tasks: Sequence[Task],
        queue: deque[int],
        outcomes: list[TaskOutcome | None],
        timeout_s: float,
    ) -> None:
        size = max(1, min(_MAX_CHUNK, len(queue) // (2 * self.num_workers)))
        chunk = [queue.popleft() for _ in range(min(size, len(queue)))]
        try:
            worker.conn.send([(i, *tasks[i]) for i in chunk])
            worker.outstanding.extend(chunk)
        except Exception:  # something in the chunk does not pickle: send one by one
            for i in chunk:
                try:
                    worker.conn.send([(i, *tasks[i])])
                    worker.outstanding.append(i)
                except Exception as exc:
                    outcomes[i] = TaskOutcome(
                        "error",
                        error=f"the task could not be sent to a worker process "
                        f"({describe_exception(exc)}); scorers must be module-level "
                        "functions and their inputs picklable.",
                    )
        worker.deadline = time.monotonic() + timeout_s

    def _wait_and_collect(
        self,
        outcomes: list[TaskOutcome | None],
        timeout_s: float,
        queue: deque[int] | None = None,
    ) -> None:
        now = time.monotonic()
        deadlines = [w.deadline for w in self._workers if w.outstanding]
        deadlines += [w.started_at + self.startup_timeout_s for w in self._workers if not w.ready]
        waitables: list[Any] = [w.conn for w in self._workers]
        waitables += [w.process.sentinel for w in self._workers]
        wait(waitables, timeout=max(0.0, min(deadlines, default=now + 1.0) - now))
        now = time.monotonic()
        for position, worker in enumerate(list(self._workers)):
            failure = self._collect(worker, outcomes, timeout_s)
            if failure is None and worker.outstanding and now >= worker.deadline:
                failure = TaskOutcome("timeout", error=f"timed out after {timeout_s:g} s")
            if failure is None:
                continue
            if worker.outstanding:
                outcomes[worker.outstanding.popleft()] = failure
                if queue is not None:
                    queue.extendleft(reversed(worker.outstanding))
            worker.kill()
            self._workers[position] = _Worker(self._context, self.preload, self.initializer)

    def _collect(
        self, worker: _Worker, outcomes: list[TaskOutcome | None], timeout_s: float
    ) -> TaskOutcome | None:
        """Read what ``worker`` has sent; a failure outcome if it died or never started."""
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                if message == _READY:
                    worker.ready = True
                    continue
                index, ok, payload = message
                if ok:
                    outcomes[index] = TaskOutcome("ok", value=payload)
                else:
                    status, error = payload
                    outcomes[index] = TaskOutcome(status, error=error)
                worker.outstanding.popleft()
                worker.deadline = time.monotonic() + timeout_s
        except (EOFError, OSError):
            pass
        if worker.process.is_alive():
            if not worker.ready and time.monotonic() - worker.started_at > self.startup_timeout_s:
                raise RewardWorkerError(
                    f"A reward worker process did not become ready within "
                    f"{self.startup_timeout_s:g} s (importing {', '.join(self.preload)})."
                )
            return None
        if not worker.ready:
            raise RewardWorkerError(
                f"A reward worker process {worker.exit_description()} before it was ready. "
                f"Check that these modules import cleanly: {', '.join(self.preload) or 'none'}, "
                "and that the main script guards its entry point with "
                "`if __name__ == '__main__':` (the spawn and forkserver start methods "
                "re-import it in every worker)."
            )
        return TaskOutcome(
            "error",
            error=f"the worker process {worker.exit_description()} while scoring this sample "
            "(a crash in native code, out of memory, or the scorer exited the process)",
        )
