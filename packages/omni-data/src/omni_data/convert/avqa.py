"""AVQA-R1-6K → RL parquet (image + audio → text, four-way choice).

Input: a directory with one JSON file per split (``train.json``, ``validation.json``), each
a list of records with ``problem``, ``data_type``, ``options`` (``["A. ...", "B. ...", ...]``),
``solution`` (``<answer>B</answer>``), ``path = {"image": ..., "audio": ...}`` relative to
the split file, ``problem_id`` and ``problem_type``. Only ``data_type == "image_audio"``
is kept. Output: ``<output-dir>/<split>.parquet`` with one absolute image path and one
absolute audio path per row, so the media directory must be mounted at the same path
wherever training reads the parquet. Ground truth is the tagged solution (its letter
upper-cased, as verl-omni's converter does).

Drop reasons, checked in this order: ``invalid_record`` (not a JSON object), ``empty_problem``,
``unsupported_modality``, ``invalid_options``, ``blank_answer_label`` (no solution, or
``<answer></answer>`` with nothing inside: the reference choice reward would pay empty
answers on such a row), ``invalid_solution`` (anything else that is not one tagged option
letter), ``path_traversal`` (a media path that resolves outside the dataset directory,
symlinks followed), ``missing_image``, ``missing_audio``.

Strict split (default on, ``strict_split=False`` / ``--no-strict-split`` to keep them): the
AVQA-R1-6K release has training rows whose media also appear in validation rows. A ``train``
row whose image or audio has the same content (SHA-256 of the file) as any image or audio
of another split's kept rows is dropped as ``shares_media_with_eval``; the other splits are
evaluation splits and are kept whole.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from omni_data.convert.options import parse_option_lines
from omni_data.convert.report import ConversionReport
from omni_data.convert.sources import decode_utf8
from omni_data.errors import InputFormatError
from omni_data.schema import rl_row, write_rl_parquet

DATA_SOURCE = "avqa_r1_6k"
KEPT_DATA_TYPE = "image_audio"
INSTRUCTION = (
    "Look at the image and listen to the audio, then choose the correct option. "
    "Put only the option letter inside <answer></answer>, for example <answer>A</answer>."
)

DROP_INVALID_RECORD = "invalid_record"
DROP_EMPTY_PROBLEM = "empty_problem"
DROP_UNSUPPORTED_MODALITY = "unsupported_modality"
DROP_INVALID_OPTIONS = "invalid_options"
DROP_BLANK_ANSWER_LABEL = "blank_answer_label"
DROP_INVALID_SOLUTION = "invalid_solution"
DROP_SHARES_MEDIA_WITH_EVAL = "shares_media_with_eval"

TRAIN_SPLIT = "train"
DROP_PATH_TRAVERSAL = "path_traversal"
DROP_MISSING_IMAGE = "missing_image"
DROP_MISSING_AUDIO = "missing_audio"

_SOLUTION = re.compile(r"^\s*<answer>\s*([A-Ha-h])\s*</answer>\s*$")
_BLANK_SOLUTION = re.compile(r"^\s*(?:<answer>\s*</answer>\s*)?$")


def _media_path(value: object, base: Path, root: Path) -> Path | None | str:
    """The absolute path of a media entry, ``None`` when absent, or a drop reason string."""
    if not isinstance(value, str) or not value.strip():
        return None
    resolved = (base / value).resolve()
    if not resolved.is_relative_to(root):
        return DROP_PATH_TRAVERSAL
    return resolved


def convert_record(
    record: dict[str, Any], split: str, index: int, split_dir: Path, root: Path
) -> tuple[dict[str, Any] | None, str]:
    """One AVQA record to an RL row, or ``(None, reason)`` when it is dropped."""
    problem = str(record.get("problem") or "").strip()
    if not problem:
        return None, DROP_EMPTY_PROBLEM
    if record.get("data_type") != KEPT_DATA_TYPE:
        return None, DROP_UNSUPPORTED_MODALITY
    options = parse_option_lines(record.get("options"))
    if options is None:
        return None, DROP_INVALID_OPTIONS
    solution = str(record.get("solution") or "")
    if _BLANK_SOLUTION.match(solution):
        return None, DROP_BLANK_ANSWER_LABEL
    match = _SOLUTION.match(solution)
    letter = match.group(1).upper() if match else ""
    if letter not in options:
        return None, DROP_INVALID_SOLUTION
    paths = record.get("path")
    if not isinstance(paths, dict):
        paths = {}
    image = _media_path(paths.get("image"), split_dir, root)
    audio = _media_path(paths.get("audio"), split_dir, root)
    if DROP_PATH_TRAVERSAL in (image, audio):
        return None, DROP_PATH_TRAVERSAL
    if not isinstance(image, Path) or not image.is_file():
        return None, DROP_MISSING_IMAGE
    if not isinstance(audio, Path) or not audio.is_file():
        return None, DROP_MISSING_AUDIO
    option_text = "\n".join(record["options"])
    row = rl_row(
        data_source=DATA_SOURCE,
        messages=[{"role": "user", "content": f"<image><audio>{problem}\n{option_text}\n{INSTRUCTION}"}],
        ground_truth=f"<answer>{letter}</answer>",
        ability="audio_visual_qa",
        images=[str(image)],
        audios=[str(audio)],
        extra_info={
            "split": split,
            "index": index,
            "problem_id": str(record.get("problem_id", "")),
            "problem_type": str(record.get("problem_type") or ""),
            "problem": problem,
            "answer": letter,
            "options": json.dumps(options, ensure_ascii=False),
        },
    )
    return row, ""


def read_split(path: Path) -> list[Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputFormatError(f"Cannot read AVQA split file {path}: {exc}") from exc
    for line_no, line in enumerate(raw.splitlines(), start=1):
        decode_utf8(line, path, line_no)  # names the first line that is not UTF-8
    try:
        records = json.loads(raw.decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise InputFormatError(f"Cannot read AVQA split file {path}: {exc}") from exc
    if not isinstance(records, list):
        raise InputFormatError(f"{path} must hold a JSON list of records, got {type(records).__name__}.")
    return records


class _ContentHashes:
    """SHA-256 of media files, each file read once."""

    def __init__(self) -> None:
        self._by_path: dict[str, str] = {}

    def of(self, path: str) -> str:
        digest = self._by_path.get(path)
        if digest is None:
            hasher = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    hasher.update(block)
            digest = self._by_path[path] = hasher.hexdigest()
        return digest

    def of_row(self, row: dict[str, Any]) -> set[str]:
        return {self.of(path) for path in [*row["images"], *row["audios"]]}


def leaking_train_rows(rows_by_split: dict[str, list[dict[str, Any]]]) -> set[int]:
    """Positions of ``train`` rows whose image or audio content also appears in another split."""
    hashes = _ContentHashes()
    eval_media: set[str] = set()
    for split, rows in rows_by_split.items():
        if split != TRAIN_SPLIT:
            for row in rows:
                eval_media |= hashes.of_row(row)
    return {
        position
        for position, row in enumerate(rows_by_split.get(TRAIN_SPLIT, []))
        if hashes.of_row(row) & eval_media
    }


def convert(input_dir: Path, output_dir: Path, *, strict_split: bool = True) -> ConversionReport:
    """Convert every ``*.json`` split under ``input_dir``; see the module docstring."""
    root = input_dir.resolve()
    if not root.is_dir():
        raise InputFormatError(f"Input directory {input_dir} does not exist or is not a directory.")
    split_files = sorted(root.glob("*.json"))
    if not split_files:
        raise InputFormatError(f"No split files (*.json) in {input_dir}; expected e.g. train.json.")
    report = ConversionReport("avqa")
    kept: dict[str, list[dict[str, Any]]] = {}
    for split_file in split_files:
        split = split_file.stem
        counts = report.split(split)
        rows = kept.setdefault(split, [])
        for index, record in enumerate(read_split(split_file)):
            if not isinstance(record, dict):
                counts.drop(DROP_INVALID_RECORD)
                continue
            row, reason = convert_record(record, split, index, split_file.parent, root)
            if row is None:
                counts.drop(reason)
            else:
                rows.append(row)
    leaking = leaking_train_rows(kept) if strict_split else set()
    for split, rows in kept.items():
        counts = report.split(split)
        if split == TRAIN_SPLIT:
            for _ in leaking:
                counts.drop(DROP_SHARES_MEDIA_WITH_EVAL)
            rows = [row for position, row in enumerate(rows) if position not in leaking]
        for _ in rows:
            counts.keep()
        report.outputs[split] = str(write_rl_parquet(rows, output_dir / f"{split}.parquet"))
    return report
