"""A verl run's terminal: one line a step, its warnings and errors; the rest in the run directory.

verl prints its whole resolved config, a progress bar and per-step dumps; Ray streams every
worker's output to the driver, each process repeating the same import warnings. A 3-step CPU
run printed about 1,800 lines. While the run is on, :class:`QuietConsole` sends everything
the ``trainer`` process and its Ray processes print to ``<run_dir>/verl.log`` (appended,
each launch headed by its time) and passes on to the terminal only:

- what our code writes to the console stream it returns (the step lines, the summary);
- a line that says ``warning:``, ``error:`` or ``note:`` (ours, from any process; Ray's
  ``(Actor pid=N)`` prefix is kept), and the Ctrl-C messages.

An exception leaving the run is printed by the caller after the terminal is restored.
``OMNI_RL_VERL_LOG=console`` keeps verl's and Ray's output on the terminal, as before.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO

LOG_NAME = "verl.log"
FULL_CONSOLE_ENV = "OMNI_RL_VERL_LOG"
FORWARDED = re.compile(rb"^(\([^)]*pid=\d+[^)]*\)\s*)?(warning|error|note|interrupt|second interrupt):")
COLOUR = re.compile(rb"\x1b\[[0-9;]*m")  # Ray colours its (Actor pid=N) prefixes


class QuietConsole:
    """Context manager: inside it, file descriptors 1 and 2 go to ``<run_dir>/verl.log``
    (and the forwarded lines to the terminal); ``__enter__`` returns the terminal as a text
    stream. Does nothing (returns ``sys.stdout``) with ``OMNI_RL_VERL_LOG=console``."""

    def __init__(self, run_dir: Path) -> None:
        self.log_path = run_dir / LOG_NAME
        self.quiet = os.environ.get(FULL_CONSOLE_ENV, "").lower() != "console"
        self._saved: tuple[int, int] | None = None
        self._pump: threading.Thread | None = None
        self.console: IO[str] = sys.stdout

    def __enter__(self) -> IO[str]:
        if not self.quiet:
            return sys.stdout
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = (os.dup(1), os.dup(2))
        self.console = os.fdopen(os.dup(self._saved[0]), "w", buffering=1)
        print(f"verl's and Ray's output: {self.log_path} (OMNI_RL_VERL_LOG=console shows it here)", file=self.console)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        self._pump = threading.Thread(target=self._copy, args=(read_end,), name="verl-console", daemon=True)
        self._pump.start()
        return self.console

    def _copy(self, read_end: int) -> None:
        terminal = os.fdopen(os.dup(self._saved[1] if self._saved else 2), "wb", buffering=0)
        with os.fdopen(read_end, "rb") as pipe, self.log_path.open("ab") as log:
            log.write(f"--- launch at {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
            for line in pipe:
                log.write(line)
                log.flush()
                if FORWARDED.match(COLOUR.sub(b"", line).lstrip()):
                    terminal.write(line)
        terminal.close()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.quiet or self._saved is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        out, err = self._saved
        os.dup2(out, 1)  # the pipe's last write ends in this process close here
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        if self._pump is not None:
            self._pump.join(timeout=10)  # a Ray process still alive may hold the pipe open
        self.console.close()
        if exc_type is not None:
            print(f"verl's and Ray's output of this run, the workers' tracebacks included: {self.log_path}",
                  file=sys.stderr)
