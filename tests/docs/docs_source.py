"""What the docs tests read: the site's pages, their fenced blocks, and the generators of
``docs/hooks/omni_docs.py`` (loaded by path: ``docs/`` is not a package)."""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SHELL_LANGUAGES = ("bash", "sh", "shell", "console")
ILLUSTRATIVE = 'title="illustrative'
"""The fence label of a block whose commands no test runs (rendered as its caption)."""
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<language>[\w-]*)(?P<info>.*)$")


def omni_docs() -> ModuleType:
    """``docs/hooks/omni_docs.py``, imported once."""
    if "omni_docs" not in sys.modules:
        spec = importlib.util.spec_from_file_location("omni_docs", DOCS / "hooks" / "omni_docs.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["omni_docs"] = module
        spec.loader.exec_module(module)
    return sys.modules["omni_docs"]


def pages() -> list[Path]:
    """Every Markdown page of the site (the hooks' folder is not part of it)."""
    return sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    info: str
    text: str

    @property
    def illustrative(self) -> bool:
        return ILLUSTRATIVE in self.info

    def commands(self) -> list[str]:
        """The block's commands: continuation lines joined, comments and blank lines left out,
        whitespace collapsed."""
        joined = re.sub(r"\\\n\s*", " ", self.text)
        commands = []
        for line in joined.splitlines():
            line = re.sub(r"(^|\s)#\s.*$", "", line).strip()
            if line:
                commands.append(" ".join(line.split()))
        return commands


def fenced_blocks(page: Path, text: str | None = None) -> list[Block]:
    """The page's fenced code blocks (of ``text`` when given: the page as built), list-indented
    ones included."""
    lines = (page.read_text() if text is None else text).splitlines()
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match:
            end = i + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            indent = len(match["indent"])
            body = "\n".join(line[indent:] for line in lines[i + 1:end])
            blocks.append(Block(page, i + 1, match["language"], match["info"].strip(), body))
            i = end
        i += 1
    return blocks
