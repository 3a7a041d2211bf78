"""NExT-QA (TinyLLaVA-Video-R1's NextQA) → RL parquet (video → text, five-way choice), as
verl-omni writes it.

Input: a directory holding the annotation JSONL (``nextqa_0-30s.jsonl`` by default) and the
extracted ``NextQA/`` tree of the Hugging Face release
``Zhang199/TinyLLaVA-Video-R1-training-data``. Each line: ``problem`` (the question with
its options ``A.`` … ``E.`` one per line), ``data_type`` (``"video"``), ``solution``
(``<answer>C</answer>``), ``video_filename`` (relative to the directory, e.g.
``./NextQA/NExTVideo/0001/x.mp4``), ``problem_id`` and ``problem_type``.

Output: ``<output-dir>/train.parquet`` and ``validation.parquet``, row for row what
verl-omni 8f82b0f5's ``examples/gspo_trainer/data_process/nextqa.py`` writes (its NextQA
pull request), so runs compare with its reports:

- ``prompt``: its system prompt, then ``"<video>{problem}"`` (the problem stripped);
- ``videos``: ``[{"video": absolute path, "fps", "min_pixels", "max_pixels",
  "max_frames"}]`` (Relax task4's budget by default: 1 fps, 32-128 visual tokens of 28x28
  pixels per frame, at most 32 frames); mount the directory at the same path wherever
  training reads the parquet;
- ``reward_model.ground_truth``: ``<answer>X</answer>``, the letter upper-cased;
- ``extra_info``: ``split``, ``index`` (the line's place in the file, blank lines counted),
  ``problem_id``, ``dataset``, ``problem_type`` (JSON), ``raw_problem``, ``raw_solution``,
  ``video_filename``, ``options`` (JSON, in the order the problem lists them).

The reward is the multiple-choice one (data source ``nextqa`` in ``omni_rewards``). The
launcher turns ``use_audio_in_video`` on, so every clip needs a soundtrack.

Drop reasons, checked in this order: ``invalid_json``, ``invalid_record`` (not a JSON
object), ``empty_problem``, ``unsupported_modality`` (``data_type`` other than ``video``),
``invalid_options`` (not exactly the options A-E, each once, with text),
``invalid_solution`` (not one tagged letter among them), ``missing_video`` (no path, a path
that resolves outside the directory, symlinks followed, or no file there). Blank lines are
skipped, not counted.

The split keeps every question of one clip on one side: the distinct video paths, sorted,
are shuffled with ``random.Random(seed)`` and the first ``min(n - 1, max(1, round(n *
validation_ratio)))`` go to validation (whose rows get ``extra_info.split =
"validation"``); each file keeps the input order. With ``validation_ratio=0`` no
validation file is written, as verl-omni.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

from omni_data.convert.report import ConversionReport
from omni_data.convert.sources import jsonl_lines
from omni_data.errors import InputFormatError
from omni_data.schema import rl_row, write_rl_parquet

DATA_SOURCE = "nextqa"
ABILITY = "video_qa"
DATASET_NAME = "TinyLLaVA-Video-R1-NextQA"
DEFAULT_INPUT_FILE = "nextqa_0-30s.jsonl"
OPTION_LETTERS = "ABCDE"
# verl-omni's system prompt, character for character.
SYSTEM_PROMPT = (
    "Analyze the visual and audio information in the video and the question carefully. Explain your reasoning "
    "inside <think> </think> tags, then give "
    "only the single correct option letter inside <answer> </answer> tags. Your response must end in exactly this "
    "form: <answer>A</answer>, where A is replaced by the correct option letter."
)

DROP_INVALID_JSON = "invalid_json"
DROP_INVALID_RECORD = "invalid_record"
DROP_EMPTY_PROBLEM = "empty_problem"
DROP_UNSUPPORTED_MODALITY = "unsupported_modality"
DROP_INVALID_OPTIONS = "invalid_options"
DROP_INVALID_SOLUTION = "invalid_solution"
DROP_MISSING_VIDEO = "missing_video"

TRAIN, VALIDATION = "train", "validation"

# An option line: "A. text" or "b) text" (either case); \s* may run over blank lines.
_OPTION_LINE = re.compile(r"^\s*(?P<letter>[A-E])[.)]\s*(?P<text>.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_TAGGED_LETTER = re.compile(r"<answer>\s*(?P<letter>[A-E])\s*</answer>", re.IGNORECASE)


def answer_letter(solution: object) -> str | None:
    """The upper-cased letter of a solution that is exactly ``<answer>X</answer>`` (inner
    and outer whitespace allowed, tags in any case), else None."""
    match = _TAGGED_LETTER.fullmatch(str(solution or "").strip())
    return match.group("letter").upper() if match else None


def options_of(problem: str) -> dict[str, str]:
    """The five options written one per line in ``problem``, by upper-case letter; empty
    unless A-E each appear exactly once with text."""
    options: dict[str, str] = {}
    for match in _OPTION_LINE.finditer(problem):
        letter, text = match.group("letter").upper(), match.group("text").strip()
        if not text or letter in options:
            return {}
        options[letter] = text
    return options if sorted(options) == list(OPTION_LETTERS) else {}


def video_under(root: Path, name: object) -> Path | None:
    """``name`` resolved below ``root`` (already resolved), or None when it is blank,
    leaves ``root`` (``..``, an absolute path, a symlink) or names no file."""
    text = str(name or "").strip()
    if not text:
        return None
    path = (root / text).resolve()
    return path if path.is_relative_to(root) and path.is_file() else None


def convert_record(
    record: dict[str, Any], index: int, root: Path, video: dict[str, Any]
) -> tuple[dict[str, Any] | None, str]:
    """One record to a ``train`` row, or ``(None, reason)``. ``video`` holds the sampling
    settings every ``videos`` entry carries; ``root`` is the resolved input directory."""
    problem = str(record.get("problem") or "").strip()
    if not problem:
        return None, DROP_EMPTY_PROBLEM
    if record.get("data_type") != "video":
        return None, DROP_UNSUPPORTED_MODALITY
    options = options_of(problem)
    if not options:
        return None, DROP_INVALID_OPTIONS
    letter = answer_letter(record.get("solution"))
    if letter is None or letter not in options:
        return None, DROP_INVALID_SOLUTION
    path = video_under(root, record.get("video_filename"))
    if path is None:
        return None, DROP_MISSING_VIDEO
    row = rl_row(
        data_source=DATA_SOURCE,
        messages=[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": f"<video>{problem}"}],
        ground_truth=f"<answer>{letter}</answer>",
        ability=ABILITY,
        videos=[{"video": str(path), **video}],
        extra_info={
            "split": TRAIN,
            "index": index,
            "problem_id": str(record.get("problem_id", index)),
            "dataset": DATASET_NAME,
            "problem_type": json.dumps(record.get("problem_type"), ensure_ascii=False),
            "raw_problem": problem,
            "raw_solution": str(record.get("solution") or ""),
            "video_filename": str(record.get("video_filename") or ""),
            "options": json.dumps(options, ensure_ascii=False),
        },
    )
    return row, ""


def validation_videos(videos: set[str], ratio: float, seed: int) -> set[str]:
    """The clips whose rows go to validation (see the module docstring).

    Raises:
        InputFormatError: ``ratio > 0`` and fewer than two distinct clips.
    """
    if ratio == 0:
        return set()
    if len(videos) < 2:
        raise InputFormatError(
            f"Only {len(videos)} distinct video(s) kept; a validation split by video needs at least two. "
            "Add clips, or pass validation_ratio=0."
        )
    order = sorted(videos)
    random.Random(seed).shuffle(order)
    count = min(len(order) - 1, max(1, round(len(order) * ratio)))
    return set(order[:count])


def _check_settings(validation_ratio: float, fps: float, min_pixels: int, max_pixels: int, max_frames: int) -> None:
    problems = []
    if not 0 <= validation_ratio < 1:
        problems.append(f"validation_ratio must be in [0, 1), got {validation_ratio}")
    if fps <= 0:
        problems.append(f"fps must be greater than zero, got {fps}")
    if min_pixels <= 0 or max_pixels < min_pixels:
        problems.append(f"pixel limits must satisfy 0 < min_pixels <= max_pixels, got {min_pixels} and {max_pixels}")
    if max_frames < 2:
        problems.append(f"max_frames must be at least 2, got {max_frames}")
    if problems:
        raise ValueError("Invalid NExT-QA conversion settings: " + "; ".join(problems) + ".")


def _annotation_file(root: Path, input_file: str) -> Path:
    path = (root / input_file).resolve()
    if not path.is_relative_to(root):
        raise InputFormatError(f"input_file {input_file!r} resolves to {path}, outside the input directory {root}.")
    if not path.is_file():
        raise InputFormatError(
            f"NExT-QA annotation file not found: {path}. Pass the directory holding {input_file} and the "
            "extracted NextQA/ tree (or name the file with input_file)."
        )
    return path


def convert(
    input_dir: Path,
    output_dir: Path,
    *,
    input_file: str = DEFAULT_INPUT_FILE,
    validation_ratio: float = 0.05,
    seed: int = 42,
    fps: float = 1.0,
    min_pixels: int = 32 * 28 * 28,
    max_pixels: int = 128 * 28 * 28,
    max_frames: int = 32,
) -> ConversionReport:
    """Convert ``input_dir/input_file``; see the module docstring.

    Raises:
        ValueError: a setting is out of range (every problem is listed).
        InputFormatError: the annotation file is missing, outside ``input_dir`` or not
            UTF-8, no row is kept, or too few clips for a validation split.
    """
    _check_settings(validation_ratio, fps, min_pixels, max_pixels, max_frames)
    root = input_dir.expanduser().resolve()
    source = _annotation_file(root, input_file)
    video = {"fps": float(fps), "min_pixels": int(min_pixels), "max_pixels": int(max_pixels),
             "max_frames": int(max_frames)}
    report = ConversionReport("nextqa")
    counts = report.split(input_file)
    rows: list[dict[str, Any]] = []
    for index, line in jsonl_lines(source):
        if not line.strip():
            continue
        row, reason = _row_of_line(line, index, root, video)
        if row is None:
            counts.drop(reason)
            continue
        rows.append(row)
        counts.keep()
        counts.tally("answer", answer_letter(row["reward_model"]["ground_truth"]) or "")
    if not rows:
        raise InputFormatError(f"No NExT-QA row kept from {source}; dropped {dict(sorted(counts.dropped.items()))}.")
    chosen = validation_videos({row["videos"][0]["video"] for row in rows}, validation_ratio, seed)
    by_split: dict[str, list[dict[str, Any]]] = {TRAIN: [], VALIDATION: []}
    for row in rows:
        split = VALIDATION if row["videos"][0]["video"] in chosen else TRAIN
        row["extra_info"]["split"] = split
        by_split[split].append(row)
        counts.tally("split", split)
    output = output_dir.expanduser().resolve()
    for split, split_rows in by_split.items():
        if split_rows or split == TRAIN:
            report.outputs[split] = str(write_rl_parquet(split_rows, output / f"{split}.parquet"))
    return report


def _row_of_line(line: str, index: int, root: Path, video: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None, DROP_INVALID_JSON
    if not isinstance(record, dict):
        return None, DROP_INVALID_RECORD
    return convert_record(record, index, root, video)
