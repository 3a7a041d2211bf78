"""AVQA-R1-6K → RL parquet (image + audio → text, multiple choice), as verl-omni writes it.

Input, either layout:

- the AVQA_R1 release, as verl-omni's converter reads it: ``train/omni_rl_format_train.json``
  (split ``train``) and ``valid/omni_rl_format_valid.json`` (split ``validation``), media
  paths relative to each file's folder (``train/images/...``, ``train/audios/...``);
- a directory with one ``<split>.json`` per split, media paths relative to it.

Each file is a JSON list of records with ``problem``, ``data_type``, ``options``
(``["A. ...", "B. ...", ...]``), ``solution`` (``<answer>B</answer>``), ``path =
{"image": ..., "audio": ...}``, ``problem_id`` and ``problem_type``. Output:
``<output-dir>/<split>.parquet``, row for row what verl-omni a1139baf's
``examples/gspo_trainer/data_process/avqa.py`` writes, so runs compare with its reports:

- ``prompt``: its system prompt, then ``"<image><audio>{problem}\\nOptions:\\n"`` and the
  options one per line as ``"A. text"`` (letters upper-cased);
- ``images``: ``[{"image": absolute path}]``, ``audios``: ``[absolute path]`` (so the media
  directory must be mounted at the same path wherever training reads the parquet);
- ``reward_model.ground_truth``: the solution as written (stripped): ``<answer>b</answer>``
  stays lower case, since the choice reward compares labels case-sensitively;
- ``extra_info``: ``split``, ``index`` (the record's place in its file), ``problem_id``,
  ``dataset``, ``problem_type``, ``raw_problem``, ``raw_solution``, ``options`` (JSON).

Drop reasons, checked in this order: ``invalid_record`` (not a JSON object), ``empty_problem``,
``unsupported_modality`` (``data_type`` other than ``image_audio``), ``invalid_options``,
``blank_answer_label`` (no solution, or ``<answer></answer>`` with nothing inside),
``invalid_solution`` (anything else that is not one tagged option letter), ``path_traversal``
(a media path that resolves outside its split's folder, symlinks followed),
``missing_image``, ``missing_audio``. verl-omni drops the same rows (blank labels as
``invalid_solution``, escaping paths as missing media).

Deliberate differences, each off by default:

- ``normalize_labels`` / ``--normalize-labels``: the ground truth becomes
  ``<answer>X</answer>`` with the letter upper-cased and no inner spaces.
- ``strict_split`` / ``--strict-split``: the AVQA-R1-6K release has training rows whose
  media also appear in validation rows. A ``train`` row whose image or audio has the same
  content (SHA-256 of the file) as any image or audio of another split's kept rows is
  dropped as ``shares_media_with_eval``; the other splits are kept whole.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from omni_data.convert.options import avqa_options
from omni_data.convert.report import ConversionReport
from omni_data.convert.sources import decode_utf8
from omni_data.errors import InputFormatError
from omni_data.schema import rl_row, write_rl_parquet

DATA_SOURCE = "avqa_r1_6k"
ABILITY = "audio_visual_qa"
DATASET_NAME = "AVQA-R1-6K"
KEPT_DATA_TYPE = "image_audio"
# verl-omni's system prompt, character for character.
SYSTEM_PROMPT = (
    "Please think about this question as if you were a human pondering deeply, carefully considering both "
    "the visual and audio information before answering, engaging in an internal dialogue using expressions "
    "such as let me think, wait, hmm, oh I see, or let's break it down, including self-reflection or "
    "verification in the reasoning process, providing the detailed reasoning between the <think> </think> "
    "tags, and finally giving only the single option letter (e.g., A, B, C, D, etc.) as the final answer "
    "within the <answer> </answer> tags."
)
RELEASE_FILES: dict[str, str] = {
    "train": "train/omni_rl_format_train.json",
    "validation": "valid/omni_rl_format_valid.json",
}
"""The AVQA_R1 release's split files (relative to ``--input``), by the split they become."""

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

_SOLUTION = re.compile(r"<answer>\s*([A-H])\s*</answer>", re.IGNORECASE)
_BLANK_SOLUTION = re.compile(r"(?:<answer>\s*</answer>)?", re.IGNORECASE)


def user_prompt(problem: str, option_lines: list[str]) -> str:
    return f"<image><audio>{problem}\nOptions:\n" + "\n".join(option_lines)


def _media_path(value: object, split_dir: Path) -> Path | None | str:
    """The absolute path of a media entry, ``None`` when absent, or a drop reason string."""
    text = str(value or "").strip()
    if not text:
        return None
    resolved = (split_dir / text).resolve()
    if not resolved.is_relative_to(split_dir.resolve()):
        return DROP_PATH_TRAVERSAL
    return resolved


def convert_record(
    record: dict[str, Any], split: str, index: int, split_dir: Path, *, normalize_labels: bool = False
) -> tuple[dict[str, Any] | None, str]:
    """One AVQA record to an RL row, or ``(None, reason)`` when it is dropped. Media paths
    are relative to ``split_dir`` (the split file's folder) and must stay inside it."""
    problem = str(record.get("problem") or "").strip()
    if not problem:
        return None, DROP_EMPTY_PROBLEM
    if record.get("data_type") != KEPT_DATA_TYPE:
        return None, DROP_UNSUPPORTED_MODALITY
    parsed = avqa_options(record.get("options"))
    if parsed is None:
        return None, DROP_INVALID_OPTIONS
    option_lines, options = parsed
    solution = str(record.get("solution") or "").strip()
    if _BLANK_SOLUTION.fullmatch(solution):
        return None, DROP_BLANK_ANSWER_LABEL
    match = _SOLUTION.fullmatch(solution)
    letter = match.group(1).upper() if match else ""
    if letter not in options:
        return None, DROP_INVALID_SOLUTION
    paths = record.get("path")
    if not isinstance(paths, dict):
        paths = {}
    image = _media_path(paths.get("image"), split_dir)
    audio = _media_path(paths.get("audio"), split_dir)
    if DROP_PATH_TRAVERSAL in (image, audio):
        return None, DROP_PATH_TRAVERSAL
    if not isinstance(image, Path) or not image.is_file():
        return None, DROP_MISSING_IMAGE
    if not isinstance(audio, Path) or not audio.is_file():
        return None, DROP_MISSING_AUDIO
    row = rl_row(
        data_source=DATA_SOURCE,
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user_prompt(problem, option_lines)},
        ],
        ground_truth=f"<answer>{letter}</answer>" if normalize_labels else solution,
        ability=ABILITY,
        images=[{"image": str(image)}],
        audios=[str(audio)],
        extra_info={
            "split": split,
            "index": index,
            "problem_id": str(record.get("problem_id", index)),
            "dataset": DATASET_NAME,
            "problem_type": str(record.get("problem_type") or ""),
            "raw_problem": problem,
            "raw_solution": str(record.get("solution") or ""),
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


def find_split_files(root: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """The split files under ``root`` by split name, and the files (or expected files) not
    converted, with why: the release layout when either of its files is there, else every
    ``<split>.json`` directly in ``root``.

    Raises:
        InputFormatError: neither layout is there.
    """
    if not root.is_dir():
        raise InputFormatError(f"Input directory {root} does not exist or is not a directory.")
    flat = sorted(root.glob("*.json"))
    release = {split: root / relative for split, relative in RELEASE_FILES.items() if (root / relative).is_file()}
    if release:
        skipped = {
            relative: "not found: the AVQA_R1 release layout has it, so this split is not written"
            for split, relative in RELEASE_FILES.items()
            if split not in release
        }
        skipped.update({path.name: "not a split file of the AVQA_R1 release layout" for path in flat})
        return release, skipped
    if not flat:
        raise InputFormatError(
            f"No AVQA split files in {root}; expected the AVQA_R1 release layout ("
            + ", ".join(RELEASE_FILES.values())
            + ") or one <split>.json per split, e.g. train.json."
        )
    return {path.stem: path for path in flat}, {}


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
        return {self.of(path) for path in [*(entry["image"] for entry in row["images"]), *row["audios"]]}


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


def convert(
    input_dir: Path, output_dir: Path, *, strict_split: bool = False, normalize_labels: bool = False
) -> ConversionReport:
    """Convert every split found under ``input_dir``; see the module docstring."""
    split_files, skipped = find_split_files(input_dir.resolve())
    report = ConversionReport("avqa")
    report.skipped.update(skipped)
    kept: dict[str, list[dict[str, Any]]] = {}
    for split, split_file in split_files.items():
        counts = report.split(split)
        rows = kept.setdefault(split, [])
        for index, record in enumerate(read_split(split_file)):
            if not isinstance(record, dict):
                counts.drop(DROP_INVALID_RECORD)
                continue
            row, reason = convert_record(record, split, index, split_file.parent, normalize_labels=normalize_labels)
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
