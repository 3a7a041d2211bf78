"""MkDocs hook (``mkdocs.yml``: ``hooks``): fills each page's ``<!-- generated: NAME -->``
markers from the code (:mod:`omni_docs`), so the config reference, the converters' layouts and
the benchmark tables are built from their sources, never copied into a page."""

from __future__ import annotations

from typing import Any

from omni_docs import expand


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return expand(markdown)
