"""Lettered choice options ("A. text"), read as verl-omni's converters read them.

verl-omni a1139baf: ``examples/gspo_trainer/data_process/avqa.py`` (``normalize_options``)
and ``mmk12.py`` (``parse_options``). The options end up in the prompt (AVQA) and in
``extra_info["options"]``, which MMK12's reward reads, so they must come out the same.
"""

from __future__ import annotations

import re

# AVQA: one whole option per list entry, "A." "A)" "A、" "A:" (either case) then the text.
_AVQA_OPTION = re.compile(r"\s*([A-Ha-h])[.)、:]\s*(.+?)\s*")
# MMK12: an option per line of the question, letters A-E upper case, "A." "A)" "A、".
_MMK12_OPTION_LINE = re.compile(r"^\s*([A-E])[.)、]\s*(.+?)\s*$", re.MULTILINE)
# MMK12 with --inline-options: a marker at the start or after whitespace, options on one line.
_INLINE_MARKER = re.compile(r"(?:(?<=\s)|^)\(?([A-H])\s*[\.．:：\)）]\s*")


def avqa_options(entries: object) -> tuple[list[str], dict[str, str]] | None:
    """AVQA's option list as prompt lines (``"B. applause"``) and a letter → text map.

    Each entry is read as text (``None`` as empty), letters upper-cased; any order and any
    count from one up. None when the list is empty or not a list, an entry is not an option,
    its text is empty, or a letter repeats.
    """
    if not isinstance(entries, list) or not entries:
        return None
    lines: list[str] = []
    options: dict[str, str] = {}
    for entry in entries:
        match = _AVQA_OPTION.fullmatch(str(entry or "").strip())
        if match is None:
            return None
        letter, text = match.group(1).upper(), match.group(2).strip()
        if not text or letter in options:
            return None
        options[letter] = text
        lines.append(f"{letter}. {text}")
    return lines, options


def mmk12_options(question: str) -> dict[str, str]:
    """Options written one per line in an MMK12 question (``A. 5.25`` / ``B) x`` / ``C、 y``).

    A later line with the same letter replaces the text and keeps the first one's place.
    Empty when there are none (a fill-in question).
    """
    options: dict[str, str] = {}
    for match in _MMK12_OPTION_LINE.finditer(question):
        options[match.group(1)] = match.group(2).strip()
    return options


def inline_options(text: str) -> dict[str, str]:
    """Options written anywhere in a question, also several on one line (``A. 1 B. 2``),
    as ``{"A": "1", "B": "2"}`` (MMK12's ``--inline-options``).

    Only a run of markers that starts at ``A`` and continues ``B``, ``C``, ... counts, so a
    stray "A." in prose does not produce options. At least two options are required;
    otherwise the result is empty.
    """
    chosen: list[re.Match[str]] = []
    expected = "A"
    for marker in _INLINE_MARKER.finditer(text):
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
