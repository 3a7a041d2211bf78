"""The README stays an overview (at most 150 lines) whose links all reach a file, and it names
the site's build and serve commands."""

from __future__ import annotations

import re

from docs_source import ROOT

README = (ROOT / "README.md").read_text()
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= 150


def test_every_relative_link_reaches_a_file() -> None:
    targets = [t for t in LINK.findall(README) if "://" not in t]
    assert len(targets) > 10
    assert sorted(t for t in targets if not (ROOT / t).exists()) == []


def test_it_names_the_build_and_the_serve_command() -> None:
    assert "uv run --group docs mkdocs build --strict" in README
    assert "uv run --group docs mkdocs serve" in README
