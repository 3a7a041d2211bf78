"""OmniVideo-R1 QI (query-intensive grounding) → RL parquet (video with its soundtrack →
grounded reasoning + answer), as verl-omni writes it.

Input: ``merged_train_all_qi.jsonl`` of the Hugging Face release ``jankin123/OmniVideo-R1``.
Each line: ``id``, ``Type`` (``..._mc_...`` for multiple choice), ``problem`` (usually
starting ``<video><audio>\\n``), ``solution``, ``videos`` and ``audios`` (one annotation
path each, e.g. ``./data/LLaVA-Video-178K/...``) and ``data_source``. Annotation paths are
mapped to local files through ``SOURCE=DEST`` prefixes (:func:`parse_path_map`; the
longest matching prefix decides; an absolute path to an existing file is taken as it is).

Output: ``<output-dir>/train.parquet`` and ``validation.parquet``, row for row what
verl-omni 433f6a31's ``examples/gspo_trainer/data_process/omnivideo_r1_qi.py`` writes (its
OmniVideo-R1 QI pull request), with one difference (below):

- ``prompt``: its system prompt (the strict ``<time>``/``<caption>``, ``<thinking>``,
  ``<answer>`` template), then ``"{question}\\n\\n{PROMPT_SUFFIX}"``. The question is the
  problem stripped, ``<video><audio>\\n`` put in front when it has no ``<video>``; with
  ``audio_from_video`` every ``<audio>`` is removed (the soundtrack comes with the video:
  train with ``use_audio_in_video``), otherwise ``<video>`` becomes ``<video><audio>`` when
  it has no ``<audio>``;
- ``videos``: ``[{"video": absolute path, "fps", "min_frames": 4, "max_frames"}]``;
  ``audios``: ``[absolute path]`` only without ``audio_from_video``;
- ``reward_model.ground_truth``: the solution, stripped;
- ``extra_info``: ``id``, ``index`` (the line's place in the file), ``dataset``, ``type``,
  ``question`` (placeholders removed), ``is_multiple_choice`` (``"_mc_"`` in the type),
  ``video_path``, ``original_video_path``, ``audio_path`` (without ``audio_from_video``),
  and ``original_data_source``.

Drop reasons, checked in this order: ``invalid_json`` (a blank line too), ``invalid_record``,
``empty_problem``, ``empty_solution``, ``invalid_video_placeholder`` (not exactly one
``<video>``), ``missing_video`` (not exactly one path, no map for it, or no file),
``invalid_audio_placeholder`` (an ``<audio>`` left with ``audio_from_video``, else not
exactly one), ``missing_audio``. ``max_samples > 0`` stops reading once that many rows are
kept.

The split keeps all rows of one video on one side: the distinct video paths, sorted, are
shuffled with ``random.Random(seed)``; whole videos go to validation, in that order, until
it holds ``min(max(val_size, 1), kept - 1)`` rows (a video holding every row is passed
over). Both files list rows video by video in the shuffled order.

Deliberate difference: ``data_source`` is always ``omnivideo_r1_qi``, the key the QI reward
is registered under (``omni_rewards`` picks a scorer by it); verl-omni copies the record's
(``0_30_s_nextqa``, ...), which only works there because its launcher names the reward
function outright. The record's value is kept as ``extra_info.original_data_source``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omni_data.convert.report import ConversionReport, SplitReport
from omni_data.convert.sources import jsonl_lines
from omni_data.errors import InputFormatError
from omni_data.schema import rl_row, write_rl_parquet

DATA_SOURCE = "omnivideo_r1_qi"
ABILITY = "omnivideo_qi"
DATASET_NAME = "OmniVideo-R1"
MIN_FRAMES = 4
# verl-omni's system prompt and question suffix, character for character.
SYSTEM_PROMPT = """You are an expert tasked with solving problems based on video and audio content.
When answering questions about videos with audio, carefully observe and analyze important clues.
For each key segment that may help answer the question, first note the time range using one decimal place
for seconds (for example, 6.2-9.3), with no overlap between segments. Then describe the key visual and
audio clues using <time>start_time-end_time</time><caption>Description of key clues</caption>.
After extracting several relevant clues, integrate them and outline your overall reasoning inside
<thinking></thinking> tags. Approach the question as a human reflecting deeply within the visual and audio
context, using natural thought expressions such as 'let me think', 'wait', 'Hmm', 'oh, I see', or
'let's break it down'. Finally, present your final answer inside <answer></answer> tags.

Example:
<time>1.0-2.5</time><caption>A person dips a paintbrush into red paint, with a soft brushing sound.</caption>
<time>5.2-6.8</time><caption>The person paints a sun on a white canvas.</caption>
<thinking>Let me think. The first segment shows preparation, and the second shows a sun being painted.
The main action is therefore painting.</thinking>
<answer>Painting a sun on a canvas</answer>"""
PROMPT_SUFFIX = """First, extract helpful segments for answering the question in this format:
<time>start_time-end_time</time><caption>Key clue description</caption>. Then provide the reasoning and final
answer as <thinking>Reasoning process here</thinking><answer>Answer here</answer>."""

DROP_INVALID_JSON = "invalid_json"
DROP_INVALID_RECORD = "invalid_record"
DROP_EMPTY_PROBLEM = "empty_problem"
DROP_EMPTY_SOLUTION = "empty_solution"
DROP_INVALID_VIDEO_PLACEHOLDER = "invalid_video_placeholder"
DROP_MISSING_VIDEO = "missing_video"
DROP_INVALID_AUDIO_PLACEHOLDER = "invalid_audio_placeholder"
DROP_MISSING_AUDIO = "missing_audio"

PathMap = tuple[str, Path]
"""An annotation path prefix (no trailing ``/``) and the local directory it stands for."""


def parse_path_map(text: str) -> PathMap:
    """``"SOURCE=DEST"`` as ``(SOURCE without trailing "/", DEST expanded and absolute)``;
    SOURCE need not exist here.

    Raises:
        ValueError: no ``=``, or an empty side.
    """
    source, sep, dest = text.partition("=")
    source = source.rstrip("/")
    if not sep or not source or not dest:
        raise ValueError(
            f"a path map must be SOURCE=DEST with both sides non-empty, e.g. "
            f"./data/LLaVA-Video-178K=/shared/LLaVA-Video-178K; got {text!r}"
        )
    return source, Path(dest).expanduser().resolve()


def resolve_media(raw: object, path_maps: Sequence[PathMap]) -> Path | None:
    """The local file an annotation path names, or None: an absolute path to an existing
    file as it is (resolved); else through the longest matching prefix (equal lengths: the
    first given), which decides even when its file is missing."""
    text = str(raw or "").strip()
    if not text:
        return None
    try:
        direct = Path(text).expanduser()
    except RuntimeError:  # "~user/..." for an unknown user
        direct = Path(text)
    if direct.is_absolute() and direct.is_file():
        return direct.resolve()
    for source, dest in sorted(path_maps, key=lambda item: len(item[0]), reverse=True):
        if text == source or text.startswith(source + "/"):
            path = (dest / text[len(source) :].lstrip("/")).resolve()
            return path if path.is_file() else None
    return None


def question_text(problem: object, audio_from_video: bool) -> str:
    """The problem with its placeholders as the prompt carries them (see the module
    docstring); empty for an empty problem."""
    question = str(problem or "").strip()
    if not question:
        return ""
    if "<video>" not in question:
        question = "<video><audio>\n" + question
    if audio_from_video:
        return question.replace("<audio>", "")
    if "<audio>" not in question:
        question = question.replace("<video>", "<video><audio>", 1)
    return question


def _only_entry(record: dict[str, Any], key: str) -> Any:
    values = record.get(key)
    return values[0] if isinstance(values, list) and len(values) == 1 else None


def _audio_of(
    record: dict[str, Any], question: str, path_maps: Sequence[PathMap], audio_from_video: bool
) -> tuple[Path | None, str]:
    """The extracted audio file the row lists (None with ``audio_from_video``), or a drop reason."""
    if audio_from_video:
        return None, DROP_INVALID_AUDIO_PLACEHOLDER if "<audio>" in question else ""
    if question.count("<audio>") != 1:
        return None, DROP_INVALID_AUDIO_PLACEHOLDER
    path = resolve_media(_only_entry(record, "audios"), path_maps)
    return path, "" if path is not None else DROP_MISSING_AUDIO


def _extra_info(
    record: dict[str, Any], index: int, question: str, video: tuple[Path, object], audio: Path | None
) -> dict[str, Any]:
    kind = str(record.get("Type") or "")
    info: dict[str, Any] = {
        "id": str(record.get("id") or index),
        "index": index,
        "dataset": DATASET_NAME,
        "type": kind,
        "question": question.replace("<video>", "").replace("<audio>", "").strip(),
        "is_multiple_choice": "_mc_" in kind.lower(),
        "video_path": str(video[0]),
        "original_video_path": str(video[1] or ""),
    }
    if audio is not None:
        info["audio_path"] = str(audio)
    info["original_data_source"] = str(record.get("data_source") or "")
    return info


def convert_record(
    record: dict[str, Any], index: int, path_maps: Sequence[PathMap], *, audio_from_video: bool, video: dict[str, Any]
) -> tuple[dict[str, Any] | None, str]:
    """One record to a row, or ``(None, reason)``. ``video`` holds the sampling settings
    every ``videos`` entry carries."""
    question = question_text(record.get("problem"), audio_from_video)
    solution = str(record.get("solution") or "").strip()
    if not question:
        return None, DROP_EMPTY_PROBLEM
    if not solution:
        return None, DROP_EMPTY_SOLUTION
    if question.count("<video>") != 1:
        return None, DROP_INVALID_VIDEO_PLACEHOLDER
    raw_video = _only_entry(record, "videos")
    video_path = resolve_media(raw_video, path_maps)
    if video_path is None:
        return None, DROP_MISSING_VIDEO
    audio_path, reason = _audio_of(record, question, path_maps, audio_from_video)
    if reason:
        return None, reason
    row = rl_row(
        data_source=DATA_SOURCE,
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"{question}\n\n{PROMPT_SUFFIX}"},
        ],
        ground_truth=solution,
        ability=ABILITY,
        videos=[{"video": str(video_path), **video}],
        audios=None if audio_path is None else [str(audio_path)],
        extra_info=_extra_info(record, index, question, (video_path, raw_video), audio_path),
    )
    return row, ""


Rows = list[dict[str, Any]]


def split_by_video(rows: Rows, val_size: int, seed: int) -> tuple[Rows, Rows]:
    """``(train, validation)`` rows, whole videos at a time (see the module docstring).

    Raises:
        InputFormatError: fewer than two rows, or no split leaves both sides non-empty.
    """
    if len(rows) < 2:
        raise InputFormatError(f"Need at least two kept QI rows for a train/validation split; kept {len(rows)}.")
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["extra_info"]["video_path"], []).append(row)
    order = sorted(groups)
    random.Random(seed).shuffle(order)
    target = min(max(val_size, 1), len(rows) - 1)
    chosen: list[str] = []
    held = 0
    for path in order:
        if chosen and held >= target:
            break
        if len(groups[path]) < len(rows):
            chosen.append(path)
            held += len(groups[path])
    held_out = set(chosen)
    validation = [row for path in chosen for row in groups[path]]
    train = [row for path in order if path not in held_out for row in groups[path]]
    if not train or not validation:
        raise InputFormatError(
            "Could not split the kept QI rows into non-empty train and validation sets of distinct videos "
            f"({len(groups)} video(s) for {len(rows)} rows); add rows of other videos."
        )
    return train, validation


def _check_settings(path_maps: Sequence[PathMap], fps: float, max_frames: int, max_samples: int, val_size: int) -> None:
    problems = []
    if not path_maps:
        problems.append("at least one SOURCE=DEST path map is required (the annotation paths are relative)")
    if any(not source or source != source.rstrip("/") for source, _ in path_maps):
        problems.append("a path map's SOURCE must be non-empty without a trailing '/' (use parse_path_map)")
    if fps <= 0:
        problems.append(f"fps must be > 0, got {fps}")
    if max_frames < MIN_FRAMES:
        problems.append(f"max_frames must be >= {MIN_FRAMES}, the min_frames every entry asks for; got {max_frames}")
    if val_size < 1:
        problems.append(f"val_size must be >= 1, got {val_size}")
    if max_samples < 0:
        problems.append(f"max_samples must be >= 0 (0 keeps all), got {max_samples}")
    if problems:
        raise ValueError("Invalid OmniVideo-R1 QI conversion settings: " + "; ".join(problems) + ".")


def _read_rows(
    source: Path, path_maps: Sequence[PathMap], counts: SplitReport, *, audio_from_video: bool,
    video: dict[str, Any], max_samples: int,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for index, line in jsonl_lines(source):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            counts.drop(DROP_INVALID_JSON)
            continue
        if not isinstance(record, dict):
            counts.drop(DROP_INVALID_RECORD)
            continue
        row, reason = convert_record(record, index, path_maps, audio_from_video=audio_from_video, video=video)
        if row is None:
            counts.drop(reason)
            continue
        rows.append(row)
        counts.keep()
        counts.tally("kind", "multiple_choice" if row["extra_info"]["is_multiple_choice"] else "open")
        if 0 < max_samples <= len(rows):
            break
    return rows


def convert(
    input_jsonl: Path,
    output_dir: Path,
    path_maps: Sequence[PathMap],
    *,
    audio_from_video: bool = True,
    fps: float = 2.0,
    max_frames: int = 64,
    max_samples: int = 0,
    val_size: int = 256,
    seed: int = 42,
) -> ConversionReport:
    """Convert ``input_jsonl``; see the module docstring.

    Raises:
        ValueError: a setting is out of range (every problem is listed).
        InputFormatError: the file cannot be read or is not UTF-8, or the kept rows cannot
            be split into non-empty train and validation sets.
    """
    _check_settings(path_maps, fps, max_frames, max_samples, val_size)
    maps = [(source, dest.expanduser().resolve()) for source, dest in path_maps]
    source = input_jsonl.expanduser().resolve()
    video = {"fps": float(fps), "min_frames": MIN_FRAMES, "max_frames": int(max_frames)}
    report = ConversionReport("omnivideo_qi")
    counts = report.split(source.name)
    rows = _read_rows(source, maps, counts, audio_from_video=audio_from_video, video=video, max_samples=max_samples)
    train, validation = split_by_video(rows, val_size, seed)
    output = output_dir.expanduser().resolve()
    for split, split_rows in (("train", train), ("validation", validation)):
        for _ in split_rows:
            counts.tally("split", split)
        report.outputs[split] = str(write_rl_parquet(split_rows, output / f"{split}.parquet"))
    return report
