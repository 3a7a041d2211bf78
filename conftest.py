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


LONGEST_FILES = (
    "apps/trainer/tests/engines/verl/test_verl_cpu_run.py",
    "tests/test_examples.py",
    "apps/trainer/tests/engines/verl/test_verl_vllm_omni_cpu_run.py",
    "apps/trainer/tests/engines/verl/test_verl_vllm_omni_talker_cpu_run.py",
    "apps/trainer/tests/engines/local/test_judge_run.py",
    "apps/trainer/tests/engines/verl/test_verl_ctrl_c.py",
    "apps/trainer/tests/engines/verl/test_verl_preference_run.py",
    "tests/gpu/test_vllm_omni_talker.py",
)
"""The test files that take longest in CI (its ``--durations``), longest first. Their order only
decides when each starts; ``tests/test_ci_policy.py`` checks that each still exists."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first, then files with more slow tests, then the rest; each file's tests
    stay together and in order. pytest-xdist hands out whole files in this order as its workers
    free up (``--dist loadfile``), so the long end-to-end runs start early and the short files
    fill in around them, instead of one worker running the last long file alone."""
    root = config.rootpath
    longest = {root / name: rank for rank, name in enumerate(LONGEST_FILES)}
    slow: dict[Any, int] = {}
    first: dict[Any, int] = {}
    for index, item in enumerate(items):
        first.setdefault(item.path, index)
        slow[item.path] = slow.get(item.path, 0) + (item.get_closest_marker("slow") is not None)
    items.sort(key=lambda item: (longest.get(item.path, len(longest)), -slow[item.path], first[item.path]))
