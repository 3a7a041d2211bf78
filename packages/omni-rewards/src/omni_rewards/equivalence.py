"""Mathematical equivalence by math-verify, the way verl's math-verify scorer calls it.

The ground truth is parsed as ``\\boxed{<ground truth>}`` with LaTeX extraction; the
prediction with expression and LaTeX extraction (math-verify prefers the last ``\\boxed{}``);
any equivalent pair counts. Keeping these exact settings is what makes our ``math`` scorer
give verl's scores on the same inputs.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

# math-verify's own per-call timeout (seconds). It is armed with signal.alarm, which only
# works in a process's main thread; elsewhere it is off and the reward manager's per-sample
# timeout (which kills the worker process) is the guard.
MATH_VERIFY_TIMEOUT_S = 5


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


def math_equivalent(prediction: str, ground_truth: str) -> bool:
    """Whether ``prediction`` (free text, LaTeX or plain) states ``ground_truth``."""
    parse, verify, gold_targets, prediction_targets = _math_verify()
    timeout = _own_timeout()
    gold = parse("\\boxed{" + ground_truth + "}", gold_targets, parsing_timeout=timeout)
    if not gold:
        return False
    predicted = parse(prediction, prediction_targets, parsing_timeout=timeout)
    return any(verify(g, p, timeout_seconds=timeout) for p in predicted for g in gold)


def warm_up() -> None:
    """One small comparison, so sympy's lazy imports happen before the first real sample
    (the reward manager's workers run this while starting, off the clock of any timeout)."""
    math_equivalent("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\sin(\\pi/4)")
