"""The RL parquet row every converter emits and the dataset reads (verl reads the same).

Columns:

- ``data_source`` (str): selects the reward scorer.
- ``prompt`` (list of ``{"role", "content"}``): chat messages; ``<image>``, ``<audio>`` and
  ``<video>`` in a message's text mark where the row's media go, in order (a message may
  instead hold content parts with the media inside).
- ``images`` (optional list): each an image path (str), ``{"bytes": ..., "path": ...}``, or
  ``{"image": path}`` (verl-omni's AVQA form); the converters write ``[{"bytes": ...}]``
  (MMK12) and ``[{"image": path}]`` (AVQA), as verl-omni's do.
- ``audios`` (optional list): audio file paths (WAV/FLAC decode without ffmpeg), or dicts.
- ``videos`` (optional list): each a video file path (str), a list of frame image paths, or
  ``{"video": ...}``.
- ``ability`` (str), ``reward_model`` = ``{"style": "rule", "ground_truth": ...}`` (never
  null or empty): text, or a struct where the scorer needs more than one field (AudioMCQ's
  ``{answer, choices, correct_choice_index, correct_choice_indices}``).
- ``extra_info`` (dict: ``split``, ``index``, ids, raw fields; options as JSON text).

Every media form the dataset reads is listed in :mod:`omni_data.rows`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

PLACEHOLDERS: dict[str, str] = {"image": "<image>", "audio": "<audio>", "video": "<video>"}
MEDIA_COLUMNS: dict[str, str] = {"image": "images", "audio": "audios", "video": "videos"}
REQUIRED_COLUMNS: tuple[str, ...] = ("data_source", "prompt", "ability", "reward_model", "extra_info")


def rl_row(
    *,
    data_source: str,
    messages: Sequence[Mapping[str, str]],
    ground_truth: str | Mapping[str, Any],
    ability: str,
    extra_info: Mapping[str, Any],
    images: Sequence[Any] | None = None,
    audios: Sequence[str] | None = None,
    videos: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """One RL row as a plain dict; media columns are only present when given."""
    row: dict[str, Any] = {
        "data_source": data_source,
        "prompt": [{"role": m["role"], "content": m["content"]} for m in messages],
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": dict(extra_info),
    }
    for column, value in (("images", images), ("audios", audios), ("videos", videos)):
        if value is not None:
            row[column] = list(value)
    return row


def write_rl_parquet(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write rows as one parquet file (schema inferred by pyarrow) and return its path.

    Columns are the union over all rows (absent values become null). An empty ``rows``
    still writes a file with the required columns, so a split that lost every row is
    visible on disk rather than silently missing.

    Raises:
        ValueError: a column mixes kinds pyarrow cannot unify in one file (e.g. image
            paths as strings in some rows and ``{"bytes", "path"}`` dicts in others).
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if rows:
        columns = list(dict.fromkeys(key for row in rows for key in row))
        try:
            table = pa.Table.from_pylist([{c: row.get(c) for c in columns} for row in rows])
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValueError(
                f"Cannot write {out}: {exc}. Use one form per column within a file, e.g. "
                "every image as {'bytes': ..., 'path': ...} (bytes may be None)."
            ) from exc
    else:
        table = pa.table({name: pa.array([], type=pa.string()) for name in REQUIRED_COLUMNS})
    pq.write_table(table, out)
    return out
