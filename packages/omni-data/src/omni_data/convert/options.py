"""Parsing lettered choice options ("A. text") out of question text or option lists."""

from __future__ import annotations

import re

# A letter marker at the start of the text or after whitespace: "A.", "A．", "A:", "A)", "(A)".
_MARKER = re.compile(r"(?:(?<=\s)|^)\(?([A-H])\s*[\.．:：\)）]\s*")
_LINE = re.compile(r"^\s*([A-H])\s*[\.．:：\)）]\s*(\S.*)$", re.S)


def parse_inline_options(text: str) -> dict[str, str]:
    """Options written inside a question, as ``{"A": "...", "B": "..."}``.

    Only a run of markers that starts at ``A`` and continues ``B``, ``C``, ... counts, so a
    stray "A." in prose does not produce options. At least two options are required;
    otherwise the result is empty.
    """
    markers = [m for m in _MARKER.finditer(text)]
    chosen: list[re.Match[str]] = []
    expected = "A"
    for marker in markers:
        if marker.group(1) == expected:
            chosen.append(marker)
            expected = chr(ord(expected) + 1)
    if len(chosen) < 2:
        return {}
    options: dict[str, str] = {}
    for i, marker in enumerate(chosen):
        end = chosen[i + 1].start() if i + 1 < len(chosen) else len(text)
        body = text[marker.end() : end].strip()
        if not body:
            return {}
        options[marker.group(1)] = body
    return options


def parse_option_lines(lines: object) -> dict[str, str] | None:
    """A list like ``["A. cat", "B. dog"]`` as ``{"A": "cat", "B": "dog"}``.

    Returns None unless it is a list of at least two strings, lettered A, B, C, ... in order,
    each with non-empty text.
    """
    if not isinstance(lines, list) or len(lines) < 2:
        return None
    options: dict[str, str] = {}
    for position, line in enumerate(lines):
        if not isinstance(line, str):
            return None
        match = _LINE.match(line)
        if match is None or match.group(1) != chr(ord("A") + position):
            return None
        options[match.group(1)] = match.group(2).strip()
    return options
