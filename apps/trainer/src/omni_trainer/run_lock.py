"""One run at a time in a run directory: an advisory lock on ``<run dir>/.lock``.

The lock is an ``fcntl.flock`` on a file that holds the holder's pid. The kernel releases it
when the holder exits, however it exits (a crash or ``kill -9`` included), so a lock is
never stale; the file is removed on a clean release. A second run into a locked directory
is refused before it reads or writes anything else there, naming the holder's pid.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

LOCK_NAME = ".lock"
"""The lock file's name in the run directory (not part of a run: moving a run aside leaves it)."""


class RunDirBusyError(RuntimeError):
    """Another process holds the run directory's lock."""


class RunDirLock:
    """Holds ``<run_dir>/.lock`` while the ``with`` block runs (creating ``run_dir`` if needed).

    Raises (on entering):
        RunDirBusyError: another process holds the lock; the message names its pid.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_pid(fd)
                os.close(fd)
                raise RunDirBusyError(
                    f"{self.run_dir} is in use by another run (pid {holder or 'unknown'}; its lock is {self.path}). "
                    "Wait for that run to finish (or stop it), or give this run its own trainer.experiment_name "
                    "(or trainer.default_local_dir)."
                ) from None
            # The holder before us may have removed the file between our open and our lock:
            # then we hold a lock on a file no one else can find; open the current one again.
            if _same_file(fd, self.path):
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # while still locked: a waiting opener re-opens
        finally:
            os.close(self._fd)  # closing releases the lock
            self._fd = None

    def __enter__(self) -> RunDirLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 64, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)
