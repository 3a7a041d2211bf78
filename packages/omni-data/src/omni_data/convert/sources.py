"""Finding and reading the raw files the converters take."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]

from omni_data.errors import InputFormatError

_SPLIT = re.compile(r"^(?P<split>[A-Za-z]+)(?:[-_.].*)?$")


def find_split_files(input_dir: Path, suffixes: Sequence[str]) -> dict[str, list[Path]]:
    """Files under ``input_dir`` (recursively) grouped by the split that starts their name.

    ``train.parquet``, ``train-00000-of-00002.parquet`` and ``main/train.jsonl`` are all
    split ``train``. Splits come back sorted by name, shards sorted within a split.

    Raises:
        InputFormatError: the directory does not exist or holds no matching file.
    """
    if not input_dir.is_dir():
        raise InputFormatError(f"Input directory {input_dir} does not exist or is not a directory.")
    found: dict[str, list[Path]] = {}
    for path in sorted(input_dir.rglob("*")):
        if not path.is_file() or path.suffix not in suffixes:
            continue
        match = _SPLIT.match(path.name)
        if match:
            found.setdefault(match.group("split").lower(), []).append(path)
    if not found:
        raise InputFormatError(
            f"No {'/'.join(suffixes)} files under {input_dir}; expected files named after "
            "their split, e.g. train.parquet or test-00000-of-00001.parquet."
        )
    return dict(sorted(found.items()))


def decode_utf8(raw: bytes, path: Path, line_no: int) -> str:
    """One line of a text input file, or an error naming the file, the line and the byte.

    Raises:
        InputFormatError: the line is not UTF-8.
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFormatError(
            f"{path}:{line_no} is not UTF-8 text (byte {raw[exc.start]:#04x} at column {exc.start + 1}); "
            "re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)."
        ) from exc


def read_records(files: Sequence[Path], required: Sequence[str] = ()) -> Iterator[dict[str, Any]]:
    """Records from parquet or JSONL files, in file order.

    Raises:
        InputFormatError: a file cannot be parsed or lacks a ``required`` column.
    """
    for path in files:
        if path.suffix == ".parquet":
            try:
                table = pq.read_table(path)
            except Exception as exc:
                raise InputFormatError(f"Cannot read parquet file {path}: {exc}") from exc
            missing = [c for c in required if c not in table.column_names]
            if missing:
                raise InputFormatError(
                    f"{path} lacks column(s) {missing}; it has {table.column_names}."
                )
            yield from table.to_pylist()
        else:
            with path.open("rb") as handle:
                for line_no, raw in enumerate(handle, start=1):
                    line = decode_utf8(raw, path, line_no)
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise InputFormatError(f"{path}:{line_no} is not valid JSON: {exc}") from exc
                    missing = [c for c in required if c not in record]
                    if missing:
                        raise InputFormatError(f"{path}:{line_no} lacks field(s) {missing}.")
                    yield record


def jsonl_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Each line of a UTF-8 text file with its 0-based number, split as Python's text mode
    splits them (``\\n``, ``\\r\\n`` or ``\\r``).

    Raises:
        InputFormatError: the file cannot be read, or a line is not UTF-8 (named).
    """
    try:
        with path.open(encoding="utf-8") as handle:
            yield from enumerate(handle)
    except UnicodeDecodeError:
        for line_no, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
            decode_utf8(raw, path, line_no)
        raise
    except OSError as exc:
        raise InputFormatError(f"Cannot read {path}: {exc}") from exc
