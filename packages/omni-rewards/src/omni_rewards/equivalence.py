"""Mathematical equivalence by math-verify, the way verl's math-verify scorer calls it.

The ground truth is parsed as ``\\boxed{<ground truth>}`` with LaTeX extraction; the
prediction with expression and LaTeX extraction (math-verify prefers the last ``\\boxed{}``);
any equivalent pair counts; an exception inside math-verify counts as "not equivalent"
(verl turns it into a 0). Keeping these exact settings is what makes our ``math`` and
``mmk12`` scorers give verl's scores on the same inputs.

Speed without changing a result: the answer is a pure function of the two strings, so
results are memoised per worker process — a group of rollouts for one prompt parses its
ground truth once, and identical answers (common within a group) are verified once. A
result is kept only when the whole call finished inside math-verify's own per-call timeout
(so no timeout can have fired and cut it short) and inside the caller's budget; there are
no shortcuts around math-verify.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from functools import cache
from typing import Any, Generic, TypeVar

logger = logging.getLogger("omni_rewards")

# math-verify's own per-call timeout (seconds), its default and so verl's. It is armed with
# signal.alarm, which only works in a process's main thread; elsewhere it is off and the
# reward manager's per-sample timeout (which kills the worker process) is the guard.
MATH_VERIFY_TIMEOUT_S = 5

CACHE_ENTRIES = 4096
"""Results (and ground-truth parses) kept per process, least recently used dropped first."""

MAX_CACHED_CHARS = 4000
"""Longer predictions (whole responses without an answer tag) are not memoised: they are
unlikely to repeat and would make the cache large."""

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A small thread-safe least-recently-used map."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            if key not in self._data:
                return None
            self._data.move_to_end(key)
            return self._data[key]

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_GOLD: _Lru[str, list[Any]] = _Lru(CACHE_ENTRIES)
_RESULTS: _Lru[tuple[str, str], bool] = _Lru(CACHE_ENTRIES)


def clear_caches() -> None:
    """Forget memoised parses and results (benchmarks use it to start cold)."""
    _GOLD.clear()
    _RESULTS.clear()


def _own_timeout() -> int | None:
    return MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


@cache
def _math_verify() -> tuple[Any, Any, tuple[Any, ...], tuple[Any, ...]]:
    """math-verify, imported on first use: it pulls in sympy (seconds), which users of the
    gsm8k or choice scorers alone should not pay for."""
    from math_verify import (  # type: ignore[import-untyped]
        ExprExtractionConfig,
        LatexExtractionConfig,
        parse,
        verify,
    )

    gold_targets = (LatexExtractionConfig(),)
    prediction_targets = (ExprExtractionConfig(), LatexExtractionConfig())
    return parse, verify, gold_targets, prediction_targets


def _gold(ground_truth: str, timeout: int | None) -> list[Any]:
    cached = _GOLD.get(ground_truth)
    if cached is not None:
        return cached
    parse, _, gold_targets, _ = _math_verify()
    start = time.monotonic()
    gold: list[Any] = parse("\\boxed{" + ground_truth + "}", gold_targets, parsing_timeout=timeout)
    if time.monotonic() - start < MATH_VERIFY_TIMEOUT_S:
        _GOLD.put(ground_truth, gold)
    return gold


def _compare(prediction: str, ground_truth: str, deadline: float) -> bool:
    parse, verify, _, prediction_targets = _math_verify()
    timeout = _own_timeout()
    gold = _gold(ground_truth, timeout)
    if not gold or time.monotonic() > deadline:
        return False
    predicted = parse(prediction, prediction_targets, parsing_timeout=timeout)
    for p in predicted:
        for g in gold:
            if time.monotonic() > deadline:
                return False
            if verify(g, p, timeout_seconds=timeout):
                return True
    return False


def math_equivalent(prediction: str, ground_truth: str, *, budget_s: float | None = None) -> bool:
    """Whether ``prediction`` (free text, LaTeX or plain) states ``ground_truth``.

    Args:
        budget_s: a bound on the whole comparison, like the timeout verl puts around its
            math-verify call: a comparison still running after it counts as not equivalent
            (it is checked between math-verify's parse and verify steps, each of which has
            its own timeout). None: no bound beyond math-verify's own.
    """
    key = (prediction, ground_truth)
    memoise = len(prediction) <= MAX_CACHED_CHARS
    if memoise and (known := _RESULTS.get(key)) is not None:
        return known
    start = time.monotonic()
    deadline = start + budget_s if budget_s is not None else float("inf")
    try:
        result = _compare(prediction, ground_truth, deadline)
    except Exception as exc:  # math-verify raised; verl scores that 0 and goes on
        logger.debug("math-verify raised %s: %s; counted as not equivalent", type(exc).__name__, exc)
        return False
    finished = time.monotonic()
    if finished > deadline:
        return False
    if memoise and finished - start < MATH_VERIFY_TIMEOUT_S:
        _RESULTS.put(key, result)
    return result


def warm_up() -> None:
    """One small comparison, so sympy's lazy imports happen before the first real sample
    (the reward manager's workers run this while starting, off the clock of any timeout)."""
    math_equivalent("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\sin(\\pi/4)")
