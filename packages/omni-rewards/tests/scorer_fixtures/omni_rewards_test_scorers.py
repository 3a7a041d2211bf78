"""Scorers that misbehave on purpose, for the reward manager's tests.

A separate importable module (conftest puts its folder on sys.path) because the manager's
worker processes import scorers by module name.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

Info = Mapping[str, Any] | None


def echo_length(solution_str: str, ground_truth: str, extra_info: Info = None) -> dict[str, float]:
    """Score = len(solution_str) / 100, so a test can tell samples apart."""
    return {"score": len(solution_str) / 100, "length": float(len(solution_str))}


def raise_value_error(solution_str: str, ground_truth: str, extra_info: Info = None) -> float:
    raise ValueError(f"cannot parse {solution_str!r}")


def exit_process(solution_str: str, ground_truth: str, extra_info: Info = None) -> float:
    os._exit(3)  # what a segfault in native code looks like from outside


def sleep_then_score(solution_str: str, ground_truth: str, extra_info: Info = None) -> float:
    time.sleep(float(solution_str))
    return 1.0


def return_text(solution_str: str, ground_truth: str, extra_info: Info = None) -> str:
    return "correct"


TEST_SCORERS = {
    "test/echo": echo_length,
    "test/raise": raise_value_error,
    "test/exit": exit_process,
    "test/sleep": sleep_then_score,
    "test/text": return_text,
}


def judged(solution_str: str, ground_truth: str, extra_info: Info = None, *, address: str) -> float:
    """The score a judge at ``address`` gives (half-second deadline): its failures are the scorer's."""
    from omni_rewards.judge import judge_score

    return judge_score(address, f"{solution_str} vs {ground_truth}", timeout_s=0.5).score
