"""A private asyncio loop on its own thread, so synchronous callers can drive ``AsyncOmni``.

``AsyncOmni`` keeps a background task (its output dispatcher) on the loop that first
generates, and its sleep/wake/LoRA calls are coroutines. The engine owns one loop for the
replica's lifetime and blocks on each call. Running it on a dedicated thread (rather than
``loop.run_until_complete`` in the caller's thread) keeps the dispatcher alive between
calls and works when the caller already runs an event loop of its own (a Ray actor, an
async agent loop).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """One event loop running forever on a daemon thread until :meth:`close`."""

    def __init__(self, name: str = "omni-rl-vllm-omni") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (exceptions propagate).

        Raises:
            RuntimeError: called from the loop's own thread (it would deadlock), or after
                :meth:`close`.
        """
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("LoopThread.run was called from its own loop; await instead.")
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError("LoopThread is closed.")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        """Stop the loop, join the thread and close the loop; safe to call twice."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()
