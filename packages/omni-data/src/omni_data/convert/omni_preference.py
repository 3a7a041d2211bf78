"""Omni-Preference (Omni-RRM) → preference parquet for offline DPO, as verl-omni writes it.

Input: the Hugging Face release ``Omni-RRM/Omni-Preference`` as cloned, laid out as
verl-omni a1139baf's ``examples/dpo_trainer/data_process/omni_preference_dpo_multisource.py``
reads it:

- ``dataset_jsonl/{image,video,audio}/final_rl_data.jsonl`` (``final_sft_data.jsonl`` is
  not read). Each line: ``{"images" | "videos" | "audios": [path], "messages": [{"role":
  "user", "content": "... ### Context\\n<Image|Video|Audio> file: ...\\nQuestion: ...\\n
  Candidate A: ...\\nCandidate B: ..."}], "solution": "<JSON with score_A, score_B,
  better>"}``;
- media under ``rlaif-v-dataset/`` (images), ``video-dataset/`` (videos) and
  ``audio_files/`` (audio, found by file name anywhere below). A listed path loses a
  leading ``/data/`` (or ``/``) and trailing ``_``; an image or video is looked for under
  its media folder, then under the root, a video without suffix also as ``.mp4``, ``.webm``,
  ``.mkv``, ``.mov`` or ``.avi``; an audio file by its name (the shortest path wins),
  then at ``audio_files/<path>``.

Output: ``<output-dir>/<modality>/{train,test}.parquet`` (one modality per file, as
verl-omni), rows of :func:`omni_data.preference.preference_row` form: the prompt is
``"<image>{question}"`` (``<video>``, ``<audio>``), ``chosen`` / ``rejected`` the better /
worse candidate by ``better``, ``win_score`` / ``lose_score`` their scores, the one media
column ``[absolute path]``, ``extra_info`` with ``split``, ``index`` (place among the
parsed pairs), ``sample_id`` (``omni_pref_<modality>_<line>``), ``question``,
``modality``, ``source_media``, ``source_media_name``, ``better`` and ``<modality>_path``.

The split keeps all pairs of one medium (by file name) on one side: media groups are
shuffled with ``random.Random(seed)`` and go to test until it holds
``max(1, round(pairs * test_ratio))`` pairs; if that took every group, the last goes back
to train. Pairs whose medium is not found (and the other late drops below) are dropped
only after the split is drawn, so the split is verl-omni's for the same seed.

Drop reasons, checked in this order: ``invalid_record`` (not a JSON object),
``no_media_entry`` (the media field is missing or an empty list), ``no_messages``, ``bad_solution``
(missing, or not a JSON object), ``equal_preference`` (``better == "equal"``),
``no_context`` (no ``### Context`` block with the four fields), ``empty_candidate``,
``bad_score`` (a score is not a number), ``invalid_better`` (neither A, B nor equal),
``empty_question``; then, after the split is drawn, ``identical_pair``, ``bad_score`` (a
NaN or infinite score), ``path_traversal`` (the path leaves the dataset root) and
``missing_media``. verl-omni drops the same rows and draws the same split, except that it
keeps three kinds of row:

- ``identical_pair`` (both candidates the same text): such a pair's DPO loss is a constant,
  and :class:`omni_data.PreferenceDataset` drops it anyway;
- a NaN or infinite score (``bad_score``), which the dataset drops too;
- ``path_traversal``: verl-omni would read a file outside the root (``..`` in the path, or
  ``/data//abs/path``).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from omni_data.convert.report import ConversionReport, SplitReport
from omni_data.convert.sources import read_records
from omni_data.errors import InputFormatError
from omni_data.preference import preference_row, write_preference_parquet
from omni_data.schema import MEDIA_COLUMNS

MODALITIES: tuple[str, ...] = ("image", "video", "audio")
JSONL = "dataset_jsonl/{modality}/final_rl_data.jsonl"
MEDIA_DIRS: dict[str, str | None] = {"image": None, "video": "video-dataset", "audio": "audio_files"}
"""Each modality's media folder under the root (images sit at their listed path)."""
VIDEO_SUFFIXES = (".mp4", ".webm", ".mkv", ".mov", ".avi")
AUDIO_SUFFIXES = (".wav", ".mp3", ".flac", ".ogg", ".m4a", ".aac")
SPLITS = ("train", "test")

DROP_INVALID_RECORD = "invalid_record"
DROP_NO_MEDIA_ENTRY = "no_media_entry"
DROP_NO_MESSAGES = "no_messages"
DROP_BAD_SOLUTION = "bad_solution"
DROP_EQUAL = "equal_preference"
DROP_NO_CONTEXT = "no_context"
DROP_EMPTY_CANDIDATE = "empty_candidate"
DROP_BAD_SCORE = "bad_score"
DROP_INVALID_BETTER = "invalid_better"
DROP_EMPTY_QUESTION = "empty_question"
DROP_IDENTICAL_PAIR = "identical_pair"
DROP_PATH_TRAVERSAL = "path_traversal"
DROP_MISSING_MEDIA = "missing_media"

_CONTEXT = re.compile(
    r"(?:Image|Video|Audio) file:\s*(?P<media>.+?)\s+Question:\s*(?P<question>.+?)\s+"
    r"Candidate A:\s*(?P<a>.+?)\s+Candidate B:\s*(?P<b>.+?)\s*\Z",
    re.DOTALL,
)


@dataclass(frozen=True)
class Pair:
    """One parsed preference pair, before its medium is looked up."""

    line: int
    media_rel: str
    question: str
    chosen: str
    rejected: str
    win_score: float
    lose_score: float
    better: str

    @property
    def media_name(self) -> str:
        """The split's grouping key: the medium's file name."""
        return PurePosixPath(self.media_rel).name or self.media_rel


def media_rel(path: str) -> str:
    """A listed media path relative to the dataset root: ``/data/`` or ``/`` and trailing
    ``_`` removed, backslashes as slashes."""
    text = path.replace("\\", "/").strip().rstrip("_")
    return text.removeprefix("/data/") if text.startswith("/data/") else text.lstrip("/")


def parse_record(record: object, modality: str, line: int) -> Pair | str:
    """One JSONL record as a :class:`Pair`, or the reason it is dropped."""
    if not isinstance(record, dict):
        return DROP_INVALID_RECORD
    entries = record.get(MEDIA_COLUMNS[modality])
    if not isinstance(entries, list) or not entries:
        return DROP_NO_MEDIA_ENTRY
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict):
        return DROP_NO_MESSAGES
    try:
        solution = json.loads(record["solution"])
    except (KeyError, TypeError, json.JSONDecodeError):
        return DROP_BAD_SOLUTION
    if not isinstance(solution, dict):
        return DROP_BAD_SOLUTION
    better = str(solution.get("better", "")).strip()
    if better == "equal":
        return DROP_EQUAL
    content = str(messages[0].get("content", ""))
    match = _CONTEXT.search(content.split("### Context", 1)[1].strip()) if "### Context" in content else None
    if match is None:
        return DROP_NO_CONTEXT
    a, b = match.group("a").strip(), match.group("b").strip()
    if not a or not b:
        return DROP_EMPTY_CANDIDATE
    try:
        score_a, score_b = float(solution.get("score_A", 0)), float(solution.get("score_B", 0))
    except (TypeError, ValueError):
        return DROP_BAD_SCORE
    if better not in ("A", "B"):
        return DROP_INVALID_BETTER
    question = match.group("question").strip()
    if not question:
        return DROP_EMPTY_QUESTION
    chosen, rejected, win, lose = (a, b, score_a, score_b) if better == "A" else (b, a, score_b, score_a)
    return Pair(line, media_rel(str(entries[0])), question, chosen, rejected, win, lose, better)


def late_drop(pair: Pair) -> str | None:
    """Why a parsed pair that verl-omni keeps is left out: drawn after the split, so the
    split stays verl-omni's."""
    if pair.chosen == pair.rejected:
        return DROP_IDENTICAL_PAIR
    if not (math.isfinite(pair.win_score) and math.isfinite(pair.lose_score)):
        return DROP_BAD_SCORE
    return None


def pick_test_media(pairs: Sequence[Pair], test_ratio: float, seed: int) -> set[str]:
    """The media names whose pairs go to test (see the module docstring)."""
    groups: dict[str, int] = {}
    for pair in pairs:
        groups[pair.media_name] = groups.get(pair.media_name, 0) + 1
    order = list(groups.items())
    random.Random(seed).shuffle(order)
    target = max(1, round(len(pairs) * test_ratio))
    test: list[str] = []
    rows = 0
    for name, count in order:
        if test and rows >= target:
            break
        test.append(name)
        rows += count
    if len(test) == len(order) > 1:
        test.pop()
    return set(test)


class MediaFinder:
    """Finds a pair's medium under the dataset root (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._audio: dict[str, str] | None = None

    def _audio_index(self) -> dict[str, str]:
        if self._audio is None:
            self._audio = {}
            for folder, _, files in os.walk(self.root / "audio_files"):
                for name in files:
                    if Path(name).suffix.lower() in AUDIO_SUFFIXES:
                        path = os.path.abspath(os.path.join(folder, name))
                        known = self._audio.get(name)
                        if known is None or (len(path), path) < (len(known), known):
                            self._audio[name] = path
        return self._audio

    def _candidates(self, modality: str, rel: str) -> list[Path]:
        name = PurePosixPath(rel).name
        if modality == "audio":
            folder = self.root / "audio_files"
            return [folder / rel, folder / "audio" / name, folder / "audio_files" / name, folder / name]
        subdir = MEDIA_DIRS[modality]
        candidates = ([self.root / subdir / rel] if subdir else []) + [self.root / rel]
        if PurePosixPath(rel).suffix:
            return candidates
        return [Path(f"{c}{suffix}") for c in candidates for suffix in ("", *VIDEO_SUFFIXES)]

    def find(self, modality: str, rel: str) -> Path | str:
        """The medium's absolute path, or why not: ``path_traversal`` or ``missing_media``."""
        normal = os.path.normpath(rel)
        if normal == ".." or normal.startswith("../") or os.path.isabs(normal):
            return DROP_PATH_TRAVERSAL
        if modality == "audio" and (indexed := self._audio_index().get(PurePosixPath(rel).name)):
            return Path(indexed)
        found = next((c for c in self._candidates(modality, rel) if c.is_file()), None)
        return Path(os.path.abspath(found)) if found is not None else DROP_MISSING_MEDIA


def to_row(pair: Pair, modality: str, split: str, index: int, path: str) -> dict[str, Any]:
    media = [path]
    return preference_row(
        data_source=f"omni_preference/{modality}",
        messages=[{"role": "user", "content": f"<{modality}>{pair.question}"}],
        chosen=pair.chosen,
        rejected=pair.rejected,
        win_score=pair.win_score,
        lose_score=pair.lose_score,
        modality=modality,
        extra_info={
            "split": split,
            "index": index,
            "sample_id": f"omni_pref_{modality}_{pair.line}",
            "question": pair.question,
            "modality": modality,
            "source_media": pair.media_rel,
            "source_media_name": pair.media_name,
            "better": pair.better,
            f"{modality}_path": path,
        },
        images=media if modality == "image" else None,
        videos=media if modality == "video" else None,
        audios=media if modality == "audio" else None,
    )


def convert_modality(
    root: Path, modality: str, output_dir: Path, counts: SplitReport, finder: MediaFinder, *,
    test_ratio: float, seed: int, max_samples: int,
) -> dict[str, Path]:
    """Convert one modality's JSONL; returns the written file per split."""
    records = list(read_records([root / JSONL.format(modality=modality)]))
    if max_samples > 0:
        records = records[:max_samples]
    pairs: list[Pair] = []
    for line, record in enumerate(records):
        parsed = parse_record(record, modality, line)
        if isinstance(parsed, str):
            counts.drop(parsed)
        else:
            pairs.append(parsed)
    test_names = pick_test_media(pairs, test_ratio, seed)
    rows: dict[str, list[dict[str, Any]]] = {split: [] for split in SPLITS}
    for index, pair in enumerate(pairs):
        split = "test" if pair.media_name in test_names else "train"
        found = late_drop(pair) or finder.find(modality, pair.media_rel)
        if isinstance(found, str):
            counts.drop(found)
            continue
        counts.keep()
        counts.tally("split", split)
        rows[split].append(to_row(pair, modality, split, index, str(found)))
    return {split: write_preference_parquet(rows[split], output_dir / modality / f"{split}.parquet")
            for split in SPLITS}


def convert(
    dataset_root: Path,
    output_dir: Path,
    *,
    modalities: Sequence[str] = MODALITIES,
    test_ratio: float = 0.1,
    seed: int = 42,
    max_samples: int = -1,
) -> ConversionReport:
    """Convert each requested modality found under ``dataset_root``; see the module docstring.

    ``max_samples > 0`` reads only that many records per modality (a quick try).

    Raises:
        InputFormatError: the root is not a directory, holds none of the requested
            modalities' JSONL, or a JSONL line is not JSON.
        ValueError: ``test_ratio`` is not strictly between 0 and 1, or a modality is unknown.
    """
    if not 0 < test_ratio < 1:
        raise ValueError(f"test_ratio must be strictly between 0 and 1, got {test_ratio}.")
    unknown = [m for m in modalities if m not in MODALITIES]
    if unknown:
        raise ValueError(f"Unknown modalities {unknown}; choose from {list(MODALITIES)}.")
    root = Path(os.path.abspath(dataset_root.expanduser()))
    if not root.is_dir():
        raise InputFormatError(f"Dataset root {dataset_root} does not exist or is not a directory.")
    present = [m for m in dict.fromkeys(modalities) if (root / JSONL.format(modality=m)).is_file()]
    if not present:
        raise InputFormatError(
            f"No Omni-Preference JSONL under {root}; expected "
            + ", ".join(JSONL.format(modality=m) for m in modalities)
            + " (the layout of the Omni-RRM/Omni-Preference release)."
        )
    report = ConversionReport("omni_preference")
    for modality in modalities:
        if modality not in present:
            report.skipped[JSONL.format(modality=modality)] = "not found: this modality is not written"
    finder = MediaFinder(root)
    for modality in present:
        written = convert_modality(
            root, modality, output_dir, report.split(modality), finder,
            test_ratio=test_ratio, seed=seed, max_samples=max_samples,
        )
        for split, path in written.items():
            report.outputs[f"{modality}/{split}"] = str(path)
    return report
