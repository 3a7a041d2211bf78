"""The repository's conftest turns a skip for a missing extra into a failure under CI.

Checked on a throwaway test tree that uses the real ``conftest.py``: one test skipped for a
missing extra (inside the test), one module skipped for it at import, one module skipped for
the missing docs dependency group, one skipped for another reason (no CUDA device).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = {
    "test_inside.py": (
        "import pytest\n"
        "def test_needs_extra():\n"
        "    pytest.skip('needs the distributed extra (uv sync --extra distributed --extra gpu)')\n"
        "def test_needs_cuda():\n"
        "    pytest.skip('needs a CUDA device')\n"
    ),
    "test_docs.py": (
        "import pytest\n"
        "pytest.importorskip('omni_rl_no_such_module', reason='needs the docs dependency group (uv sync --group docs)')\n"
        "def test_never_runs():\n"
        "    pass\n"
    ),
    "test_module.py": (
        "import pytest\n"
        "pytest.importorskip('omni_rl_no_such_module', reason='needs the gpu extra (uv sync --extra gpu)')\n"
        "def test_never_runs():\n"
        "    pass\n"
    ),
}


def run(tree: Path, ci: str | None, target: str = ".") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", target],
        cwd=tree, env=env, capture_output=True, text=True, timeout=120,
    )


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    for name, text in TESTS.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_missing_extras_skip_outside_ci(tree: Path) -> None:
    done = run(tree, None)
    assert done.returncode == 0, done.stdout
    assert "4 skipped" in done.stdout


@pytest.mark.parametrize("ci", ["true", "1"])
def test_missing_extras_fail_in_ci(tree: Path, ci: str) -> None:
    inside = run(tree, ci, "test_inside.py")
    assert inside.returncode == 1, inside.stdout
    assert "1 failed" in inside.stdout and "1 skipped" in inside.stdout  # the CUDA skip stays a skip
    assert "CI installs every extra, but this test was skipped" in inside.stdout
    module = run(tree, ci, "test_module.py")  # a module skipped at import fails its collection
    assert module.returncode != 0 and "CI installs every extra" in module.stdout, module.stdout
    docs = run(tree, ci, "test_docs.py")  # the docs group is installed by CI too
    assert docs.returncode != 0 and "CI installs every extra" in docs.stdout, docs.stdout
