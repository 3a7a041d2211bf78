"""The multimodal RL dataset: RL parquet rows → what the rollout and training engines consume.

Loading (the constructor) reads the parquet files, checks every row's structure and, by
default, encodes every row once through the processor: that both measures the prompt
length for the overlong filter and proves each image, audio and video decodes. A bad row
(malformed columns, an unreadable medium, a null or empty ground truth) fails the load
with an error naming the row and the file, or, with ``on_bad_row="skip"``, is counted
under its reason and left out. Nothing is dropped silently later: a row that
fails in ``__getitem__`` (a file removed after loading) raises.

Media stay as paths or bytes inside the pyarrow tables; each ``__getitem__`` decodes only
its own row.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from omni_data.encode import EncodedPrompt, encode_row
from omni_data.errors import InputFormatError, RowError
from omni_data.media import MediaSettings, settings_from_processor
from omni_data.rows import ParsedRow, parse_row, raw_prompt, soundtracks_as_audio
from omni_data.schema import REQUIRED_COLUMNS

logger = logging.getLogger(__name__)

OVERLONG = "overlong_prompt"
EMPTY_GROUND_TRUTH = "empty_ground_truth"


@dataclass(frozen=True)
class DatasetConfig:
    """How the dataset loads and filters rows. Names follow verl's ``data.*`` keys."""

    max_prompt_length: int = 1024
    """Prompt budget in tokens, media tokens included (verl: ``data.max_prompt_length``)."""
    filter_overlong_prompts: bool = True
    """Leave out (and count) rows whose encoded prompt exceeds ``max_prompt_length``."""
    on_bad_row: Literal["raise", "skip"] = "raise"
    """``raise``: the first malformed row or unreadable medium fails the load, naming both.
    ``skip``: such rows are counted per reason in :attr:`RLDataset.report` and left out."""
    check_media_at_load: bool = True
    """Encode every row once at load. Needed for the overlong filter; without it a bad
    medium only surfaces (loudly) when its row is read."""
    prompt_key: str = "prompt"
    video_fps: float = 2.0
    """Frames per second sampled from video files (frame-list videos are used as given)."""
    video_max_frames: int = 32
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    mm_processor_kwargs: Mapping[str, Any] = field(default_factory=dict)
    use_audio_in_video: bool = False
    """Interleave each video's soundtrack with its frames (Qwen-Omni's ``use_audio_in_video``);
    a video without one is a bad row (``no_soundtrack``). ``mm_processor_kwargs`` may say the
    same (verl-omni's spelling), never the opposite."""
    soundtrack_as_audio: bool = False
    """Hear each video's soundtrack as an audio item of its own, placed right after the video
    (verl-omni's ``NextQARLHFDataset``): the frames and the sound are not interleaved. Exclusive
    with ``use_audio_in_video``; a video without one is a bad row (``no_soundtrack``)."""
    required_extra_info: tuple[str, ...] = ()
    """``extra_info`` keys every row must hold as a non-empty string (a speech stage's
    ``spoken_text``); a row without one is a bad row (``missing_extra_info``)."""
    require_ground_truth: bool = True
    """A row whose ``reward_model.ground_truth`` is null or empty is a bad row
    (``empty_ground_truth``). Off only where nothing scores against it: a speech stage, whose
    rewards score the audio."""

    def __post_init__(self) -> None:
        problems = []
        if self.max_prompt_length <= 0:
            problems.append(f"max_prompt_length must be positive, got {self.max_prompt_length}")
        if self.on_bad_row not in ("raise", "skip"):
            problems.append(f"on_bad_row must be 'raise' or 'skip', got {self.on_bad_row!r}")
        if self.filter_overlong_prompts and not self.check_media_at_load:
            problems.append(
                "filter_overlong_prompts needs check_media_at_load=True (lengths come from "
                "encoding each row); enable it or turn the filter off"
            )
        said = self.mm_processor_kwargs.get("use_audio_in_video")
        if said is not None and bool(said) != self.use_audio_in_video:
            problems.append(
                f"mm_processor_kwargs has use_audio_in_video={said} but use_audio_in_video is {self.use_audio_in_video}; "
                "the dataset decodes the soundtracks the processor interleaves, so set them alike"
            )
        if self.soundtrack_as_audio and self.use_audio_in_video:
            problems.append(
                "soundtrack_as_audio and use_audio_in_video both hear a video's soundtrack, as an audio item of its own "
                "or interleaved with the frames; choose one"
            )
        if self.video_fps <= 0 or self.video_max_frames < 2:
            problems.append("video_fps must be positive and video_max_frames at least 2")
        if problems:
            raise ValueError("Invalid DatasetConfig: " + "; ".join(problems) + ".")


@dataclass
class LoadReport:
    """What loading kept and left out, per reason."""

    total: int = 0
    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    """The first error message seen for each skip reason, to show the user what went wrong."""
    longest_prompt: int = 0
    label: str = "RL dataset"
    soundtrack_tokens: list[int] = field(default_factory=list)
    """Per kept row whose videos carry their soundtracks (``use_audio_in_video``): the audio
    tokens among its frames."""

    def format(self) -> str:
        reasons = ", ".join(f"{r}={n}" for r, n in sorted(self.dropped.items())) or "none"
        heard = self.soundtrack_tokens
        sound = (f"; {len(heard)} rows hear their videos' soundtracks ({min(heard)}-{max(heard)} audio tokens among "
                 "the frames a row)") if heard else ""
        return (
            f"{self.label}: read {self.total} rows, kept {self.kept}, dropped "
            f"{sum(self.dropped.values())} ({reasons}); longest kept prompt "
            f"{self.longest_prompt} tokens{sound}"
        )


def _as_files(data_files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Path]:
    files = [Path(data_files)] if isinstance(data_files, (str, os.PathLike)) else [Path(f) for f in data_files]
    if not files:
        raise InputFormatError("No data files given; pass one or more RL parquet paths.")
    return files


def _read(path: Path) -> pa.Table:
    if not path.is_file():
        raise InputFormatError(f"RL parquet file {path} does not exist.")
    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise InputFormatError(f"Cannot read RL parquet file {path}: {exc}") from exc
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise InputFormatError(
            f"{path} lacks required column(s) {missing} (it has {table.column_names}); "
            "convert the raw data with `uv run trainer convert <dataset> --input DIR --output-dir DIR` (see --help)."
        )
    return table


class RLDataset:
    """Map-style dataset over one or many RL parquet files.

    ``dataset[i]`` returns a dict with ``input_ids`` and ``attention_mask`` (1-D int64
    tensors of the templated prompt, media tokens expanded), ``multi_modal_inputs``
    (the processor's other tensors: ``pixel_values``, ``image_grid_thw``,
    ``input_features``, ``feature_attention_mask``, ``pixel_values_videos``, ...),
    ``raw_prompt`` (messages with media as paths/bytes), ``data_source``,
    ``reward_model``, ``ability``, ``extra_info``, ``index`` and ``source``
    (``"file:row"``).
    """

    def __init__(
        self,
        data_files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        processor: Any,
        config: DatasetConfig | None = None,
    ) -> None:
        self.config = config or DatasetConfig()
        self.processor = processor
        self.settings: MediaSettings = settings_from_processor(
            processor, video_fps=self.config.video_fps, video_max_frames=self.config.video_max_frames
        )
        self.files = _as_files(data_files)
        self._tables = [_read(path) for path in self.files]
        self._rows: list[tuple[int, int]] = []
        self.report = LoadReport()
        self._load()
        logger.info(self.report.format())

    def _load(self) -> None:
        for file_index, table in enumerate(self._tables):
            for row in range(table.num_rows):
                self.report.total += 1
                try:
                    length, heard = self._check(file_index, row)
                except RowError as exc:
                    if self.config.on_bad_row == "raise":
                        raise
                    self.report.dropped[exc.reason] += 1
                    if exc.reason not in self.report.examples:
                        self.report.examples[exc.reason] = str(exc)
                        logger.warning("skipping bad rows (%s), first: %s", exc.reason, exc)
                    continue
                if self.config.filter_overlong_prompts and length > self.config.max_prompt_length:
                    self.report.dropped[OVERLONG] += 1
                    continue
                self.report.kept += 1
                self.report.longest_prompt = max(self.report.longest_prompt, length)
                if heard:
                    self.report.soundtrack_tokens.append(heard)
                self._rows.append((file_index, row))

    def _check(self, file_index: int, row: int) -> tuple[int, int]:
        """The row's prompt length and its soundtracks' tokens (0, 0 unchecked at load)."""
        parsed = self._parse(file_index, row)
        if not self.config.check_media_at_load:
            return 0, 0
        encoded = self._encode(parsed, self._where(file_index, row))
        return len(encoded), encoded.soundtrack_tokens

    def _where(self, file_index: int, row: int) -> str:
        return f"row {row} of {self.files[file_index]}"

    def _parse(self, file_index: int, row: int) -> ParsedRow:
        where = self._where(file_index, row)
        raw = self._tables[file_index].slice(row, 1).to_pylist()[0]
        parsed = parse_row(raw, where=where, prompt_key=self.config.prompt_key)
        if self.config.soundtrack_as_audio:
            parsed = soundtracks_as_audio(parsed, where=where)
        self._check_reward(parsed, where)
        if not isinstance(parsed.fields.get("data_source"), str):
            raise RowError(f"{where}: column 'data_source' must be a string.", reason="bad_data_source")
        extra_info = parsed.fields.get("extra_info") or {}
        for key in self.config.required_extra_info:
            value = extra_info.get(key) if isinstance(extra_info, Mapping) else None
            if not isinstance(value, str) or not value.strip():
                raise RowError(
                    f"{where}: extra_info[{key!r}] must be a non-empty string, got {value!r}.",
                    reason="missing_extra_info",
                )
        return parsed

    def _check_reward(self, parsed: ParsedRow, where: str) -> None:
        """The row's ``reward_model``: a dict with a ground truth (unless not required)."""
        reward = parsed.fields.get("reward_model")
        if not isinstance(reward, Mapping) or "ground_truth" not in reward:
            raise RowError(
                f"{where}: column 'reward_model' must be a dict with 'ground_truth', got {reward!r}.",
                reason="bad_reward_model",
            )
        truth = reward["ground_truth"]
        empty = truth is None or (isinstance(truth, str) and not truth.strip()) or (
            isinstance(truth, (list, tuple, Mapping)) and not truth
        )
        if empty and self.config.require_ground_truth:
            raise RowError(
                f"{where}: reward_model.ground_truth is {truth!r}; a row without a ground truth cannot be "
                "scored (every answer would score 0). Fix the row, or set on_bad_row=skip to leave such "
                "rows out (counted as empty_ground_truth).",
                reason=EMPTY_GROUND_TRUTH,
            )

    def _encode(self, parsed: ParsedRow, where: str) -> EncodedPrompt:
        return encode_row(
            self.processor,
            parsed,
            self.settings,
            where=where,
            chat_template_kwargs=self.config.chat_template_kwargs,
            mm_processor_kwargs=self.config.mm_processor_kwargs,
            use_audio_in_video=self.config.use_audio_in_video,
        )

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, item: int) -> dict[str, Any]:
        file_index, row = self._rows[item]
        where = self._where(file_index, row)
        parsed = self._parse(file_index, row)
        encoded = self._encode(parsed, where)
        extra_info = dict(parsed.fields.get("extra_info") or {})
        return {
            "input_ids": encoded.input_ids,
            "attention_mask": encoded.attention_mask,
            "multi_modal_inputs": encoded.multi_modal_inputs,
            "raw_prompt": raw_prompt(parsed),
            "data_source": parsed.fields["data_source"],
            "reward_model": dict(parsed.fields["reward_model"]),
            "ability": parsed.fields.get("ability"),
            "extra_info": extra_info,
            "index": extra_info.get("index", item),
            "source": f"{self.files[file_index]}:{row}",
        }
