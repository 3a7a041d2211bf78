"""Text extraction shared by the scorers: answer tags and angle markers."""

from __future__ import annotations

import re

_ANSWER_PAIR = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)

# An angle written after a number: "30°", "30 ^\circ", "30\circ". The number stays, the
# marker goes. Only these three markers, and only after a number, as verl-omni's MMK12
# reward does it: "^{\circ}", "\degree" and "º" are left for math-verify to read (it reads
# the first two itself). ``\d`` and ``\s`` are Unicode-aware, as they are there.
_ANGLE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:°|\^\\circ|\\circ)")


def answer_payloads(text: str) -> list[str]:
    """The contents of every complete ``<answer>…</answer>`` pair, in order, unstripped."""
    return _ANSWER_PAIR.findall(text)


def first_answer_payload(text: str) -> str | None:
    """The stripped content of the first ``<answer>…</answer>`` pair; None when there is none."""
    match = _ANSWER_PAIR.search(text)
    return match.group(1).strip() if match else None


def has_one_answer_tag_each(text: str) -> bool:
    """Exactly one ``<answer>`` and exactly one ``</answer>`` in ``text`` (in any order)."""
    return text.count("<answer>") == 1 and text.count("</answer>") == 1


def normalise_angles(text: str) -> str:
    """Drop ``°``, ``^\\circ`` and ``\\circ`` written after a number (``30°`` -> ``30``)."""
    return _ANGLE.sub(r"\1", text)
