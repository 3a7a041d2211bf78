"""Multiple-choice options as datasets carry them in ``extra_info["options"]``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def read_options(extra_info: Mapping[str, Any] | None) -> dict[str, str] | None:
    """The letter → value map in ``extra_info["options"]`` (a JSON object or a mapping).

    Returns None when there are no options.

    Raises:
        ValueError: the options are present but not a map of letters to values.
    """
    if not extra_info or extra_info.get("options") in (None, ""):
        return None
    raw = extra_info["options"]
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"extra_info['options'] is not valid JSON ({exc.msg}); expected a JSON object "
                'such as {"A": "30°", "B": "45°"}.'
            ) from exc
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"extra_info['options'] must map option letters to values, got "
            f"{type(raw).__name__}; expected e.g. {{\"A\": \"30°\", \"B\": \"45°\"}}."
        )
    return {str(letter).strip(): str(value) for letter, value in raw.items()}
