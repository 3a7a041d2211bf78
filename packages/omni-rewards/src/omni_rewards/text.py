"""Text extraction shared by the scorers: answer tags, ``\\boxed{}``, angle symbols."""

from __future__ import annotations

import re

_ANSWER_PAIR = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BOXED = re.compile(r"\\boxed\s*\{")

# Degree markers a model (or a dataset) may write after an angle; removed before comparison
# so "30^\circ", "30°" and "30" compare equal. Longest first, so "^{\circ}" goes as a whole.
_DEGREE_MARKERS = ("^{\\circ}", "^\\circ", "\\circ", "\\degree", "^{°}", "°", "º")


def answer_payloads(text: str) -> list[str]:
    """The contents of every complete ``<answer>…</answer>`` pair, in order."""
    return _ANSWER_PAIR.findall(text)


def has_single_answer_pair(text: str) -> bool:
    """Exactly one ``<answer>`` and one ``</answer>``, the opening one first."""
    if text.count("<answer>") != 1 or text.count("</answer>") != 1:
        return False
    return text.index("<answer>") < text.index("</answer>")


def last_boxed_content(text: str) -> str | None:
    """The brace-balanced content of the last ``\\boxed{…}``; None when absent or unclosed."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    start = starts[-1]
    depth = 1
    for position in range(start, len(text)):
        char = text[position]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start:position]
    return None


def normalise_angles(text: str) -> str:
    """Drop degree markers (``°``, ``^\\circ``, ``\\degree``) so angles compare as numbers."""
    for marker in _DEGREE_MARKERS:
        text = text.replace(marker, "")
    return text
