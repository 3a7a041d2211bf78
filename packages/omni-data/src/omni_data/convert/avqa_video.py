"""AVQA on its original videos (MM 2022's AVQA, not AVQA-R1's image + audio pairs) → RL
parquet (a clip heard and seen → one of four options), as verl-omni writes it.

Input: the release's annotation files, ``train_qa.json`` and ``val_qa.json`` (each a JSON
list of questions), and the directory of its ``<video_name>.mp4`` clips. Each question:
``id``, ``video_id``, ``video_name``, ``question_text``, ``multi_choice`` (four option
texts), ``answer`` (the right option's index, 0-3), ``question_relation`` and
``question_type``.

Output: ``<output-dir>/train.parquet``, ``validation.parquet`` and ``manifest.json``, row
for row what verl-omni 8af0d948's ``examples/gspo_trainer/data_process/avqa_video.py``
writes (the official splits kept as they are):

- ``prompt``: its system prompt, then ``"<video>{question}\\nOptions:\\nA. ...\\nD. ..."``;
- ``videos``: ``[{"video": absolute path, "fps", "max_frames", "min_pixels": 32*28*28,
  "max_pixels": 128*28*28}]``; the clip's soundtrack is heard as an audio item of its own,
  as verl-omni's launcher hears it: train with ``data.soundtrack_as_audio=true``
  (``data.custom_cls.name=NextQARLHFDataset`` says the same);
- ``reward_model.ground_truth``: ``<answer>X</answer>``; the data source ``avqa_video`` is
  scored by the multiple-choice scorer (``omni_rewards``' ``choice``, verl-omni's
  ``choice_reward.py``);
- ``extra_info``: ``split``, ``index`` (the question's place in its file), ``problem_id``,
  ``video_id``, ``video_name``, ``dataset``, ``raw_question``, ``answer_index``,
  ``answer_letter``, ``options`` (JSON), ``question_relation``, ``question_type``;
- ``manifest.json``: each annotation file's SHA-256 and counts, the clips both splits share,
  and each split's kept and dropped counts.

Refused, as verl-omni refuses them: a file that is not a JSON list, a question id twice in a
file, a question id in both splits, an output directory that already holds the files
(``overwrite`` replaces them), and a split that keeps no row. Drop reasons, checked in this
order: ``invalid_record``, ``empty_question``, ``invalid_options`` (not four non-empty
texts), ``duplicate_options``, ``invalid_answer`` (not an integer 0-3), ``invalid_video_name``
(blank or a path), ``missing_video`` (no ``<video_name>.mp4`` in the directory, symlinks
followed), ``invalid_question_id``.
"""

from __future__ import annotations

import hashlib
import json
import math
from numbers import Integral
from pathlib import Path
from typing import Any

from omni_data.convert.report import ConversionReport
from omni_data.errors import InputFormatError
from omni_data.schema import rl_row, write_rl_parquet

DATA_SOURCE = "avqa_video"
ABILITY = "audio_visual_qa"
DATASET_NAME = "AVQA"
SOURCE_URL = "https://github.com/AlyssaYoung/AVQA"
LETTERS = "ABCD"
MIN_PIXELS, MAX_PIXELS = 32 * 28 * 28, 128 * 28 * 28
# verl-omni's system prompt, character for character.
SYSTEM_PROMPT = (
    "Consider both the visual and audio information in the video. Explain your reasoning inside "
    "<think> </think> tags, then give only the correct option letter inside <answer> </answer> tags."
)
SPLITS = (("train", "train.parquet"), ("validation", "validation.parquet"))
MANIFEST = "manifest.json"

DROP_INVALID_RECORD = "invalid_record"
DROP_EMPTY_QUESTION = "empty_question"
DROP_INVALID_OPTIONS = "invalid_options"
DROP_DUPLICATE_OPTIONS = "duplicate_options"
DROP_INVALID_ANSWER = "invalid_answer"
DROP_INVALID_VIDEO_NAME = "invalid_video_name"
DROP_MISSING_VIDEO = "missing_video"
DROP_INVALID_QUESTION_ID = "invalid_question_id"


def question_id(record: dict[str, Any]) -> str | None:
    """The record's ``id`` as text: a non-blank string or an integer (not a bool), else None."""
    value = record.get("id")
    if isinstance(value, bool) or not isinstance(value, (str, Integral)) or not str(value).strip():
        return None
    return str(value)


def convert_record(record: dict[str, Any], index: int, split: str, root: Path,
                   video: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """One question to a row of ``split``, or ``(None, reason)``; ``root`` is the resolved clip
    directory, ``video`` the sampling settings each ``videos`` entry carries."""
    question = record.get("question_text")
    if not isinstance(question, str) or not question.strip():
        return None, DROP_EMPTY_QUESTION
    choices = record.get("multi_choice")
    if not isinstance(choices, list) or len(choices) != 4 or any(
            not isinstance(choice, str) or not choice.strip() for choice in choices):
        return None, DROP_INVALID_OPTIONS
    choices = [choice.strip() for choice in choices]
    if len(set(choices)) != 4:
        return None, DROP_DUPLICATE_OPTIONS
    answer = record.get("answer")
    if isinstance(answer, bool) or not isinstance(answer, Integral) or not 0 <= int(answer) < 4:
        return None, DROP_INVALID_ANSWER
    clip = record.get("video_name")
    if not isinstance(clip, str) or not clip.strip() or Path(clip).name != clip or clip in (".", ".."):
        return None, DROP_INVALID_VIDEO_NAME
    path = (root / f"{clip}.mp4").resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return None, DROP_MISSING_VIDEO
    problem_id = question_id(record)
    if problem_id is None:
        return None, DROP_INVALID_QUESTION_ID
    letter, options = LETTERS[int(answer)], dict(zip(LETTERS, choices, strict=True))
    listed = "\n".join(f"{label}. {text}" for label, text in options.items())
    row = rl_row(
        data_source=DATA_SOURCE,
        messages=[{"role": "system", "content": SYSTEM_PROMPT},
                  {"role": "user", "content": f"<video>{question.strip()}\nOptions:\n{listed}"}],
        ground_truth=f"<answer>{letter}</answer>",
        ability=ABILITY,
        videos=[{"video": str(path), **video}],
        extra_info={
            "split": split,
            "index": index,
            "problem_id": problem_id,
            "video_id": str(record.get("video_id", "")),
            "video_name": clip,
            "dataset": DATASET_NAME,
            "raw_question": question.strip(),
            "answer_index": int(answer),
            "answer_letter": letter,
            "options": json.dumps(options, ensure_ascii=False),
            "question_relation": str(record.get("question_relation", "")),
            "question_type": str(record.get("question_type", "")),
        },
    )
    return row, ""


def read_annotations(path: Path) -> list[Any]:
    """The file's questions.

    Raises:
        InputFormatError: the file is missing, is not a JSON list, or holds a question id twice.
    """
    if not path.is_file():
        raise InputFormatError(f"AVQA annotation file not found: {path} (the release's train_qa.json / val_qa.json).")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputFormatError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(records, list):
        raise InputFormatError(f"{path}: AVQA's annotations are a JSON list of questions, got {type(records).__name__}.")
    seen: set[str] = set()
    for record in records:
        identity = question_id(record) if isinstance(record, dict) else None
        if identity is None:
            continue
        if identity in seen:
            raise InputFormatError(f"{path}: question id {identity!r} appears twice.")
        seen.add(identity)
    return records


def audit(train: list[Any], validation: list[Any], files: dict[str, Path]) -> dict[str, Any]:
    """Each file's digest and counts, and what the splits share (none of their questions).

    Raises:
        InputFormatError: a question id is in both splits.
    """
    sources, identities, clips = {}, {}, {}
    for split, records in (("train", train), ("validation", validation)):
        dicts = [record for record in records if isinstance(record, dict)]
        identities[split] = {identity for identity in map(question_id, dicts) if identity is not None}
        clips[split] = {r["video_name"] for r in dicts if isinstance(r.get("video_name"), str) and r["video_name"].strip()}
        sources[split] = {
            "annotation_sha256": hashlib.sha256(files[split].read_bytes()).hexdigest(),
            "questions": len(records),
            "unique_question_ids": len(identities[split]),
            "unique_video_names": len(clips[split]),
        }
    shared = identities["train"] & identities["validation"]
    if shared:
        raise InputFormatError(f"{len(shared)} question ids are in both splits (e.g. {sorted(shared)[0]!r}); "
                               "AVQA's official splits share none.")
    return {"annotation_sources": sources,
            "source_split_overlap": {"question_ids": 0, "video_names": len(clips["train"] & clips["validation"])}}


def _check_settings(fps: float, max_frames: int) -> None:
    if not math.isfinite(fps) or fps <= 0 or max_frames <= 0:
        raise ValueError(f"Invalid AVQA video conversion settings: fps and max_frames must be positive, got {fps} "
                         f"and {max_frames}.")


def convert(train_json: Path, validation_json: Path, video_root: Path, output_dir: Path, *, fps: float = 1.0,
            max_frames: int = 32, overwrite: bool = False) -> ConversionReport:
    """Convert both official splits; see the module docstring.

    Raises:
        ValueError: ``fps`` or ``max_frames`` is not positive.
        InputFormatError: see the module docstring.
    """
    _check_settings(fps, max_frames)
    output = output_dir.expanduser().resolve()
    existing = [name for name in (*(file for _, file in SPLITS), MANIFEST) if (output / name).exists()]
    if existing and not overwrite:
        raise InputFormatError(f"{output} already holds {', '.join(existing)}; choose another output directory or "
                               "pass overwrite (--overwrite).")
    files = {"train": train_json.expanduser().resolve(), "validation": validation_json.expanduser().resolve()}
    records = {split: read_annotations(path) for split, path in files.items()}
    manifest: dict[str, Any] = {"dataset": "AVQA original videos", "source": SOURCE_URL,
                                "modality": "video plus soundtrack", "fps": fps, "max_frames": max_frames,
                                **audit(records["train"], records["validation"], files)}
    root = video_root.expanduser().resolve()
    video = {"fps": float(fps), "max_frames": int(max_frames), "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS}
    report = ConversionReport("avqa_video")
    for split, file in SPLITS:
        counts = report.split(split)
        rows = []
        for index, record in enumerate(records[split]):
            row, reason = (convert_record(record, index, split, root, video) if isinstance(record, dict)
                           else (None, DROP_INVALID_RECORD))
            if row is None:
                counts.drop(reason)
                continue
            rows.append(row)
            counts.keep()
            counts.tally("answer", row["extra_info"]["answer_letter"])
        if not rows:
            raise InputFormatError(f"No AVQA {split} question kept from {files[split]}; dropped "
                                   f"{dict(sorted(counts.dropped.items()))}.")
        report.outputs[split] = str(write_rl_parquet(rows, output / file))
        manifest[split] = {"input": counts.total, "kept": counts.kept, "dropped": dict(sorted(counts.dropped.items()))}
    (output / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    report.outputs["manifest"] = str(output / MANIFEST)
    return report
