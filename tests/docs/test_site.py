"""The site builds with ``mkdocs build --strict`` (the command ``docs/index.md`` and the README
give), and the strict build fails on a broken link or anchor that a page gains on purpose."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from docs_source import ROOT

pytest.importorskip("mkdocs", reason="needs the docs dependency group (uv sync --group docs)")
pytest.importorskip("material", reason="needs the docs dependency group (uv sync --group docs)")
ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=root, env=ENV, capture_output=True, text=True, timeout=300)


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    reference = (tmp_path / "site" / "reference" / "config" / "index.html").read_text()
    assert 'id="actor_rollout_ref.rollout.n"' in reference  # the generated part reached the page
    assert "<!-- generated:" not in (tmp_path / "site" / "data" / "index.html").read_text()


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    """The site's sources in a scratch tree (what the hooks read included)."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "docs", tree / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", tree / "mkdocs.yml")
    (tree / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "README.md", tree / "benchmarks" / "README.md")
    return tree


@pytest.mark.parametrize(("link", "warning"), [
    ("[gone](no-such-page.md)", "no-such-page.md"),
    ("[gone](trainer.md#no-such-section)", "no-such-section"),
])
def test_the_strict_build_fails_on_a_broken_link(copy: Path, link: str, warning: str) -> None:
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text() + f"\nSee {link}.\n")
    done = build(copy, copy / "site")
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "WARNING" in output and warning in output, output
