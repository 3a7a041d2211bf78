"""AudioMCQ (audio → text, multiple choice) → RL parquet, as verl-omni writes it.

Input, as verl-omni 53c73e5d's ``examples/gspo_trainer/data_process/audiomcq.py`` reads it: one JSONL
file of records with ``question`` (text), ``choices`` (2 to 26 texts), ``answer`` (exactly
one of the choices, character for character), ``audio_path`` (relative to ``audio_root``,
which must hold the files) and optionally ``source_dataset`` and ``id``. Blank lines are
skipped but counted, so a record's ``index`` is its 0-based line number.

Output: ``<output-dir>/train.parquet`` and ``<output-dir>/validation.parquet``, row for row
what verl-omni writes:

- ``data_source`` ``"Harland/AudioMCQ-StrongAC-GeminiCoT"`` (selects the ``audio_mcq``
  scorer), ``ability`` ``"audio_mcq"``;
- ``prompt``: one user message, ``"<audio>\\n[Question] {question}\\nPlease choose the answer
  from the following options:\\n"``, the choices one per line as ``"A. text"`` in the order
  given, then ``"\\nOutput the final answer in <answer> </answer>."``;
- ``audios``: ``[absolute path]`` (symlinks resolved; the audio root must be mounted at the
  same path wherever training reads the parquet);
- ``reward_model.ground_truth``: a struct ``{answer, choices, correct_choice_index,
  correct_choice_indices}`` (the answer's position, and that position alone in a list);
- ``extra_info``: ``index``, ``source_dataset``, ``source_id`` (``id``, else the index),
  ``split``.

(The columns are in :func:`omni_data.schema.rl_row`'s order, ``audios`` last; the values are
verl-omni's.)

Drop reasons, checked in this order (verl-omni's tags): ``invalid_question`` (not text,
blank, or holding ``<audio>``), ``invalid_choices`` (not a list of 2 to 26 non-blank texts
free of ``<audio>``), ``ambiguous_answer`` (two choices the reward cannot tell apart, or the
answer is not exactly one choice), ``invalid_audio_path`` (not a non-empty text),
``audio_outside_root`` (the path resolves outside ``audio_root``, symlinks followed),
``missing_audio`` (not a file, or empty; audio is not decoded). The report counts them on its
``records`` line (every record read); the ``train`` and ``validation`` lines count rows written.

Split: rows are grouped by audio file, so questions about one recording stay together. The
groups' paths are sorted, shuffled with ``random.Random(seed)``, and the first
``validation_size`` go to validation; rows keep their file order within a split. For the
same input, audio root and seed, the same rows land in validation as with verl-omni.

Deliberate differences:

- Existing output is refused only where it would be overwritten: ``train.parquet`` or
  ``validation.parquet`` already in ``output_dir`` raises ``FileExistsError``. verl-omni
  refuses any existing ``output_dir``, even an empty one. Either way a prepared split is
  never replaced by a rerun with, say, another seed. (A check, not a lock against two
  concurrent runs into one directory.)
- No ``dataset_info.json``: the counts come back as the :class:`ConversionReport`, which
  the CLI prints, as for every other converter.
- Unreadable input raises :class:`InputFormatError` naming the file and line (verl-omni:
  ``ValueError`` for a line that is not an object, ``JSONDecodeError``,
  ``UnicodeDecodeError``), and so do too few audio files for both splits, with the drop
  counts (verl-omni: a bare ``ValueError``). A missing audio root is refused up front, and a
  ``validation_size`` below 1 before anything is read.
- An ``audio_path`` with a NUL character is ``invalid_audio_path``; verl-omni counts it under
  the text of Python's error, ``embedded null byte``. An audio file that cannot be
  ``stat``-ed for another reason (e.g. permission) is ``missing_audio``, where verl-omni
  crashes.
"""

from __future__ import annotations

import json
import random
import stat
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from omni_data.convert.report import ConversionReport
from omni_data.convert.sources import decode_utf8
from omni_data.errors import InputFormatError
from omni_data.schema import rl_row, write_rl_parquet

DATA_SOURCE = "Harland/AudioMCQ-StrongAC-GeminiCoT"
ABILITY = "audio_mcq"
AUDIO_PLACEHOLDER = "<audio>"
MIN_CHOICES, MAX_CHOICES = 2, 26
TRAIN_SPLIT, VALIDATION_SPLIT = "train", "validation"
AUDIT = "records"
"""The report's line for the audit of every record (drops have no split: it is drawn after)."""

DROP_INVALID_QUESTION = "invalid_question"
DROP_INVALID_CHOICES = "invalid_choices"
DROP_AMBIGUOUS_ANSWER = "ambiguous_answer"
DROP_INVALID_AUDIO_PATH = "invalid_audio_path"
DROP_AUDIO_OUTSIDE_ROOT = "audio_outside_root"
DROP_MISSING_AUDIO = "missing_audio"

# What the audio_mcq reward strips around an answer before comparing (omni_rewards'
# scorers/audio_mcq.py). Choices equal under that comparison are ambiguous, so the two
# must stay in step.
_SURROUNDING_PUNCTUATION = " \t\r\n\"'`“”‘’.,;:!?！？。，；："


@dataclass(frozen=True)
class AudioQuestion:
    """One record that passed the audit, before it is given a split."""

    index: int
    question: str
    choices: list[str]
    answer: str
    label: int
    """The answer's position among the choices."""
    audio: str
    """Absolute, resolved path: the split's grouping key."""
    source_dataset: str
    source_id: str


def answer_key(text: str) -> str:
    """``text`` as the reward compares it: NFKC, whitespace runs as one space, surrounding
    quotes and punctuation stripped, case-folded."""
    collapsed = " ".join(unicodedata.normalize("NFKC", text).split())
    return collapsed.strip(_SURROUNDING_PUNCTUATION).casefold()


def user_prompt(question: str, choices: Sequence[str]) -> str:
    options = "\n".join(f"{chr(ord('A') + i)}. {choice}" for i, choice in enumerate(choices))
    return (
        f"{AUDIO_PLACEHOLDER}\n[Question] {question.strip()}\n"
        f"Please choose the answer from the following options:\n{options}\n"
        "Output the final answer in <answer> </answer>."
    )


def _usable_text(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and bool(value.strip()) and AUDIO_PLACEHOLDER not in value


def _audio_file(raw_path: str, root: Path) -> Path | str:
    """The resolved audio path under ``root`` (already resolved), or a drop reason."""
    if "\x00" in raw_path:
        return DROP_INVALID_AUDIO_PATH
    audio = (root / raw_path).resolve()
    if not audio.is_relative_to(root):
        return DROP_AUDIO_OUTSIDE_ROOT
    try:
        info = audio.stat()
    except OSError:
        return DROP_MISSING_AUDIO
    if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
        return DROP_MISSING_AUDIO
    return audio


def audit_record(record: dict[str, Any], index: int, root: Path) -> AudioQuestion | str:
    """One JSONL record as an :class:`AudioQuestion`, or the reason it is dropped."""
    question, choices, answer = record.get("question"), record.get("choices"), record.get("answer")
    if not _usable_text(question):
        return DROP_INVALID_QUESTION
    if not isinstance(choices, list) or not MIN_CHOICES <= len(choices) <= MAX_CHOICES:
        return DROP_INVALID_CHOICES
    if not all(_usable_text(choice) for choice in choices):
        return DROP_INVALID_CHOICES
    if len({answer_key(choice) for choice in choices}) != len(choices) or choices.count(answer) != 1:
        return DROP_AMBIGUOUS_ANSWER
    raw_path = record.get("audio_path")
    if not isinstance(raw_path, str) or not raw_path:
        return DROP_INVALID_AUDIO_PATH
    audio = _audio_file(raw_path, root)
    if isinstance(audio, str):
        return audio
    label = choices.index(answer)
    return AudioQuestion(
        index=index,
        question=question,
        choices=list(choices),
        answer=choices[label],
        label=label,
        audio=str(audio),
        source_dataset=str(record.get("source_dataset", "")),
        source_id=str(record.get("id", index)),
    )


def build_row(item: AudioQuestion, split: str) -> dict[str, Any]:
    return rl_row(
        data_source=DATA_SOURCE,
        messages=[{"role": "user", "content": user_prompt(item.question, item.choices)}],
        ground_truth={
            "answer": item.answer,
            "choices": list(item.choices),
            "correct_choice_index": item.label,
            "correct_choice_indices": [item.label],
        },
        ability=ABILITY,
        audios=[item.audio],
        extra_info={
            "index": item.index,
            "source_dataset": item.source_dataset,
            "source_id": item.source_id,
            "split": split,
        },
    )


def read_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(0-based line number, record)`` for every non-blank line of a JSONL file.

    Lines end at ``\\n``, ``\\r\\n`` or a lone ``\\r`` (Python's text mode, as verl-omni
    reads the file), so indices agree with its ``extra_info.index``.

    Raises:
        InputFormatError: the file cannot be opened, or a line is not UTF-8, not JSON, or
            not a JSON object.
    """
    try:
        handle = path.open(encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        raise InputFormatError(f"Cannot read the AudioMCQ JSONL file {path}: {exc}") from exc
    with handle:
        for index, line in enumerate(handle):
            line_no = index + 1
            if not line.isascii():  # undecodable bytes came through as lone surrogates
                decode_utf8(line.encode("utf-8", "surrogateescape"), path, line_no)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputFormatError(f"{path}:{line_no} is not valid JSON: {exc}") from exc
            if not isinstance(record, dict):
                raise InputFormatError(
                    f"{path}:{line_no} holds a JSON {type(record).__name__}, not an object; each line "
                    "must be one record with question, choices, answer and audio_path."
                )
            yield index, record


def validation_audio(audio_paths: set[str], validation_size: int, seed: int) -> set[str]:
    """The audio files held out for validation: the first ``validation_size`` of the sorted
    paths after ``random.Random(seed).shuffle`` (verl-omni's draw, so its split for a seed)."""
    order = sorted(audio_paths)
    random.Random(seed).shuffle(order)
    return set(order[:validation_size])


def _refuse_existing_output(output_dir: Path) -> None:
    names = (f"{TRAIN_SPLIT}.parquet", f"{VALIDATION_SPLIT}.parquet")
    existing = [name for name in names if (output_dir / name).exists()]
    if existing:
        raise FileExistsError(
            f"{output_dir} already holds {', '.join(existing)}; AudioMCQ conversions are never overwritten, "
            "so a prepared split stays as it was trained on. Choose a new --output-dir, or delete the old "
            "files first."
        )


def convert(
    input_jsonl: Path,
    audio_root: Path,
    output_dir: Path,
    *,
    validation_size: int = 256,
    seed: int = 42,
) -> ConversionReport:
    """Audit the records of ``input_jsonl`` and write an audio-disjoint train/validation split;
    see the module docstring.

    Args:
        validation_size: how many distinct audio files (not rows) go to validation.
        seed: seed of the shuffle that picks them.

    Raises:
        ValueError: ``validation_size`` is below 1.
        FileExistsError: ``output_dir`` already holds a ``train.parquet`` or ``validation.parquet``.
        InputFormatError: the audio root is not a directory; the JSONL is unreadable; or too
            few audio files survive the audit to leave one in train.
    """
    if validation_size < 1:
        raise ValueError(f"validation_size counts held-out audio files and must be >= 1, got {validation_size}.")
    _refuse_existing_output(output_dir)
    if not audio_root.is_dir():
        raise InputFormatError(f"Audio root {audio_root} does not exist or is not a directory.")
    root = audio_root.resolve()
    report = ConversionReport("audiomcq")
    audit = report.split(AUDIT)
    kept: list[AudioQuestion] = []
    for index, record in read_records(input_jsonl):
        audited = audit_record(record, index, root)
        if isinstance(audited, str):
            audit.drop(audited)
        else:
            audit.keep()
            kept.append(audited)
    audio_paths = {item.audio for item in kept}
    if validation_size >= len(audio_paths):
        raise InputFormatError(
            f"Only {len(audio_paths)} distinct audio files of {input_jsonl} passed the audit "
            f"({' '.join(audit.lines())}); validation_size={validation_size} must leave at least one "
            "for train. Lower validation_size, or check audio_root and the drop reasons."
        )
    held_out = validation_audio(audio_paths, validation_size, seed)
    rows: dict[str, list[dict[str, Any]]] = {TRAIN_SPLIT: [], VALIDATION_SPLIT: []}
    for item in kept:
        split = VALIDATION_SPLIT if item.audio in held_out else TRAIN_SPLIT
        rows[split].append(build_row(item, split))
    for split, split_rows in rows.items():
        counts = report.split(split)
        for _ in split_rows:
            counts.keep()
        report.outputs[split] = str(write_rl_parquet(split_rows, output_dir / f"{split}.parquet"))
    return report
