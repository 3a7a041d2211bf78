"""Repository-wide test policy: in CI, a test skipped for a missing extra is a failure.

Tests that need the ``distributed`` or ``gpu`` extra skip with a reason naming
``uv sync --extra ...`` (the docs tests: ``uv sync --group docs``) so a developer without them
still gets a green run. CI installs
every extra (``.ci/run``); there, such a skip means the environment is broken, and it fails
(``CI=true`` or ``CI=1``). Skips for other reasons (no CUDA device) are untouched.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

MISSING_EXTRA_MARKS = ("uv sync --extra", "uv sync --group docs")


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _fail_missing_extra(report: Any) -> None:
    if not (_in_ci() and report.skipped):
        return
    reason = str(report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr)
    if any(mark in reason for mark in MISSING_EXTRA_MARKS):
        report.outcome = "failed"
        report.longrepr = f"CI installs every extra, but this test was skipped: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    _fail_missing_extra(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    _fail_missing_extra(outcome.get_result())
