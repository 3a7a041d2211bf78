"""Multiple-choice options as datasets carry them in ``extra_info["options"]``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Options:
    """What ``extra_info["options"]`` held: a letter → text map, or why there is none."""

    by_letter: Mapping[str, str]
    """Empty when there are no options (absent, empty, or malformed)."""

    problem: str | None = None
    """Set when options were present but malformed: a data problem, counted in the reward
    metrics (``reward/data_problems``), never an exception that fails a batch."""


NO_OPTIONS = Options({})


def read_options(extra_info: Mapping[str, Any] | None) -> Options:
    """The options in ``extra_info["options"]``: JSON text of an object such as
    ``{"A": "30°", "B": "45°"}`` (what the converters write), or that object itself (what a
    parquet struct column reads back as). Values must be text or numbers.

    An absent or empty value means no options; anything else that is not such an object is
    reported in :attr:`Options.problem` and treated as no options.
    """
    raw = (extra_info or {}).get("options")
    if not raw:
        return NO_OPTIONS
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            return _malformed(f"is not valid JSON ({exc})")
    if not isinstance(raw, Mapping):
        return _malformed(f"is a JSON {type(raw).__name__}, not an object of letters to texts")
    options: dict[str, str] = {}
    for letter, text in raw.items():
        if isinstance(text, bool) or not isinstance(text, str | int | float):
            return _malformed(f"maps {letter!r} to a {type(text).__name__}, not a text")
        options[str(letter)] = str(text)
    return Options(options)


def _malformed(why: str) -> Options:
    return Options(
        {},
        f'extra_info["options"] {why}; expected e.g. {{"A": "30°", "B": "45°"}}. '
        "Scored as a question without options; fix the dataset.",
    )
