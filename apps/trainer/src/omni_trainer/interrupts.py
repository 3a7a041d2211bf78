"""Ctrl-C: during start-up, stop at once; during training, stop at a step boundary, save, exit.

- Start-up (the config's checks, loading, the reward workers' imports, the validation before
  the first step) has nothing to save: the first SIGINT stops the run at once
  (``KeyboardInterrupt``; the trainer exits 130).
- During training, the first SIGINT asks the run to stop. A step still rolling out or scoring is discarded
  (it is never trained on: its scoring may have been cut short); a step already updating
  the policy finishes. Then the newest state is saved and the run exits; the same command
  resumes it.
- ``uv run`` forwards the SIGINT it receives to the trainer, which, in the same process
  group, also receives it directly: one Ctrl-C arrives twice. A repeat within
  :data:`REPEAT_WINDOW_S` of the first is taken as that duplicate and ignored.
- A later SIGINT quits at once, without saving (the newest saved checkpoint is kept).
- Reward worker processes ignore SIGINT (:func:`workers_ignore_sigint`, held only while
  they are created: the run still hears Ctrl-C while they import); the parent stops them
  when the run ends.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

REPEAT_WINDOW_S = 1.0


class StopRequest:
    """The run's stop flag, set by SIGINT while :meth:`installed` is active.

    Until :meth:`begin_training`, SIGINT raises ``KeyboardInterrupt`` (start-up has nothing
    to save); after it, the first SIGINT sets :attr:`requested`.

    Args:
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.requested = False
        self.starting = True
        self.first_at: float | None = None
        self.on_request: list[Callable[[], None]] = []
        """Called once, when a stop is first requested during training (the verl engine tells
        its trainer, in another process, through them)."""

    def begin_training(self) -> None:
        """Start-up is over: from now on the first SIGINT stops at the end of a step."""
        self.starting = False

    def handle(self, signum: int = signal.SIGINT, frame: FrameType | None = None) -> None:
        now = self.clock()
        if self.starting:
            if self.first_at is not None and now - self.first_at < REPEAT_WINDOW_S:
                return  # the same Ctrl-C, forwarded a second time (uv run)
            self.requested, self.first_at = True, now
            raise KeyboardInterrupt
        if not self.requested:
            self.requested = True
            self.first_at = now
            print(
                "\ninterrupt: stopping at the end of this step (a step not yet updating the policy is "
                "discarded), then saving. Ctrl-C again to quit at once without saving.",
                file=sys.stderr, flush=True,
            )
            for tell in self.on_request:
                tell()
            return
        if self.first_at is not None and now - self.first_at < REPEAT_WINDOW_S:
            return  # the same Ctrl-C, forwarded a second time (uv run)
        print("\nsecond interrupt: quitting now without saving", file=sys.stderr, flush=True)
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """SIGINT sets this flag inside the block; the previous handler comes back after."""
        previous = signal.signal(signal.SIGINT, self.handle)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def workers_ignore_sigint() -> Iterator[None]:
    """Ignore SIGINT while worker processes are created, so they inherit the disposition.

    Hold it only around creating them (``RewardManager.launch``), never around waiting for
    them (``RewardManager.start``): a Ctrl-C arriving while SIGINT is ignored is lost.

    A terminal's Ctrl-C goes to the whole foreground process group; the reward workers must
    not die of it mid-batch (their samples would score 0 and be trained on). A process
    started with SIGINT ignored keeps it ignored: a forked one inherits it, and Python leaves
    an ignored SIGINT alone at start-up (spawn, forkserver), including the fork server that
    starts every later replacement worker.
    """
    previous: Any = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
