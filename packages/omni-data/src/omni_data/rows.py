"""Parsing one RL parquet row into chat messages with media references (nothing decoded).

A parsed row keeps media as paths or bytes; decoding happens in :mod:`omni_data.media`
when a worker encodes the row.

Media entries are read in every form verl's ``RLHFDataset`` (which verl-omni's dataset
classes extend) hands on to Qwen's loaders, plus ``{"bytes", "path"}`` audio:

- a string: a local path, ``file://`` + path, or a ``data:<mime>;base64,`` URI;
- ``{"bytes": ..., "path": ...}`` (Hugging Face's image form; bytes win, ``bytes=None``
  falls back to the path);
- ``{"image" | "image_url": str}``, ``{"audio" | "audio_url": str}``, ``{"video": str |
  [frames]}``, each with Qwen's per-medium settings (:data:`OPTION_KEYS`);
- a list of frame images for a video.

Media may also sit inside the prompt itself, as content parts (``{"type": "image",
"image": ...}``), with no media columns: verl leaves such messages as they are. An entry in
any other form, a remote URL, or a setting omni-data cannot honour is an error naming the row.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from omni_data.errors import RowError
from omni_data.schema import MEDIA_COLUMNS, PLACEHOLDERS

MediaKind = Literal["image", "audio", "video"]
_SPLIT = re.compile("(" + "|".join(re.escape(p) for p in PLACEHOLDERS.values()) + ")")
_KIND_OF = {placeholder: kind for kind, placeholder in PLACEHOLDERS.items()}

SOURCE_KEYS: dict[str, tuple[str, ...]] = {
    "image": ("image", "image_url"),
    "audio": ("audio", "audio_url"),
    "video": ("video",),
}
"""Keys of a media dict that hold the medium itself (besides ``bytes``/``path``), as Qwen's
``fetch_image``, ``process_audio_info`` and ``fetch_video`` read them."""
OPTION_KEYS: dict[str, tuple[str, ...]] = {
    "image": ("min_pixels", "max_pixels", "resized_height", "resized_width"),
    "audio": ("audio_start", "audio_end"),
    "video": ("fps", "min_frames", "max_frames", "min_pixels", "max_pixels", "total_pixels", "resized_height",
              "resized_width"),
}
"""Per-medium settings honoured as Qwen's loaders honour them (pixel budgets, fixed sizes,
audio start/end in seconds, video sampling rate and frame bounds)."""
_UNSUPPORTED_KEYS = ("nframes", "video_start", "video_end", "sample_fps")


@dataclass(frozen=True)
class MediaRef:
    """One medium as stored in the parquet: a file path, inline bytes, or video frames,
    with the per-medium settings of :data:`OPTION_KEYS` it carried."""

    kind: MediaKind
    path: str | None = None
    data: bytes | None = None
    frames: tuple[MediaRef, ...] | None = None
    options: tuple[tuple[str, float], ...] = ()

    def option(self, key: str) -> float | None:
        return dict(self.options).get(key)

    def describe(self) -> str:
        if self.frames is not None:
            return f"{len(self.frames)} frames starting {self.frames[0].describe()}"
        if self.path:
            return f"file {self.path}" if self.data is None else f"inline bytes from {self.path}"
        return f"inline {self.kind} bytes"


@dataclass(frozen=True)
class ParsedRow:
    """A row ready to encode: content-part messages whose media parts hold a ``MediaRef``."""

    messages: list[dict[str, Any]]
    media: tuple[MediaRef, ...]
    fields: dict[str, Any]


_ACCEPTED = {
    "image": "a path, 'file://' or 'data:' URI, {'bytes', 'path'}, or {'image': path}",
    "audio": "a path, 'file://' or 'data:' URI, {'bytes', 'path'}, or {'audio': path}",
    "video": "a path, 'file://' URI, a list of frame images, or {'video': path or frames}",
}


def _bad(kind: MediaKind, value: object, where: str, why: str = "") -> RowError:
    shown = str(value)[:80]
    detail = f" ({why})" if why else ""
    return RowError(
        f"{where}: a {kind} entry must be {_ACCEPTED[kind]}, got {type(value).__name__} {shown!r}{detail}.",
        reason="bad_media_column",
    )


def _from_string(kind: MediaKind, text: str, where: str, options: tuple[tuple[str, float], ...]) -> MediaRef:
    if text.startswith(("http://", "https://")):
        raise RowError(
            f"{where}: {kind} {text[:80]!r} is a remote URL; omni-data reads local files only (nothing is "
            "downloaded while training). Download it and store the local path.",
            reason="bad_media_column",
        )
    if text.startswith("data:"):
        header, _, payload = text.partition(",")
        if kind == "video" or not header.endswith(";base64"):
            raise _bad(kind, text, where, "only base64 'data:' URIs of images and audio are read")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise _bad(kind, text, where, f"invalid base64: {exc}") from exc
        if not data:
            raise _bad(kind, text, where, "empty data URI")
        return MediaRef(kind, data=data, options=options)
    path = text.removeprefix("file://")
    if not path:
        raise _bad(kind, text, where)
    return MediaRef(kind, path=path, options=options)


def _options(kind: MediaKind, entry: Mapping[str, Any], where: str) -> tuple[tuple[str, float], ...]:
    present = {k: v for k, v in entry.items() if v is not None}
    unsupported = [k for k in _UNSUPPORTED_KEYS if k in present]
    if unsupported:
        raise RowError(
            f"{where}: the {kind} entry sets {unsupported}, which omni-data does not honour (videos are "
            "sampled at 'fps' within 'min_frames' and 'max_frames' over the whole clip); remove them, or cut the file beforehand.",
            reason="bad_media_column",
        )
    known = {"bytes", "path", "type", *SOURCE_KEYS[kind], *OPTION_KEYS[kind]}
    unknown = sorted(k for k in present if k not in known)
    if unknown:
        raise RowError(
            f"{where}: the {kind} entry has key(s) {unknown} omni-data does not know; a {kind} dict holds "
            f"{['bytes', 'path', *SOURCE_KEYS[kind]]} and optionally {list(OPTION_KEYS[kind])}.",
            reason="bad_media_column",
        )
    options: list[tuple[str, float]] = []
    for key in OPTION_KEYS[kind]:
        value = present.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise RowError(
                f"{where}: the {kind} entry's {key!r} must be a non-negative number, got {value!r}.",
                reason="bad_media_column",
            )
        options.append((key, value))
    start, end = dict(options).get("audio_start", 0.0), dict(options).get("audio_end")
    if end is not None and end <= start:
        raise RowError(
            f"{where}: the audio entry's audio_end ({end}) must be after audio_start ({start}).",
            reason="bad_media_column",
        )
    return tuple(options)


def _ref(kind: MediaKind, value: object, where: str) -> MediaRef:
    """One media entry, in any form the module docstring lists, as a :class:`MediaRef`."""
    if isinstance(value, str) and value:
        return _from_string(kind, value, where, ())
    if kind == "video" and isinstance(value, list) and value:
        return MediaRef(kind, frames=tuple(_ref("image", frame, f"{where}, frame {i}") for i, frame in enumerate(value)))
    if not isinstance(value, Mapping):
        raise _bad(kind, value, where)
    options = _options(kind, value, where)
    data, path = value.get("bytes"), value.get("path")
    if isinstance(data, (bytes, bytearray)) and data:
        if kind == "video":
            raise _bad(kind, value, where, "inline video bytes are not read; store the file's path")
        return MediaRef(kind, path=path if isinstance(path, str) else None, data=bytes(data), options=options)
    for key in SOURCE_KEYS[kind]:
        source = value.get(key)
        if isinstance(source, str) and source:
            return _from_string(kind, source, where, options)
        if kind == "video" and isinstance(source, list) and source:
            frames = _ref("video", source, where).frames
            return MediaRef(kind, frames=frames, options=options)
        if source is not None:
            raise _bad(kind, value, where, f"{key!r} holds {type(source).__name__}")
    if isinstance(path, str) and path:
        return _from_string(kind, path, where, options)
    raise _bad(kind, value, where)


def parse_row(raw: Mapping[str, Any], *, where: str, prompt_key: str = "prompt") -> ParsedRow:
    """Validate one row's prompt and media columns and pair each placeholder with its medium.

    Args:
        raw: the row as a dict (pyarrow ``to_pylist`` form).
        where: how errors name the row, e.g. ``"row 7 of /data/train.parquet"``.

    Raises:
        RowError: ``bad_prompt``, ``bad_media_column`` or ``media_count_mismatch``, naming the row.
    """
    prompt = raw.get(prompt_key)
    if not isinstance(prompt, list) or not prompt or not all(
        isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), (str, list))
        for m in prompt
    ):
        raise RowError(
            f"{where}: column {prompt_key!r} must be a non-empty list of {{'role': str, 'content': str "
            f"or a list of content parts}} messages, got {str(prompt)[:120]!r}.",
            reason="bad_prompt",
        )
    queues: dict[str, list[MediaRef]] = {}
    for kind, column in MEDIA_COLUMNS.items():
        values = raw.get(column)
        if values is None:
            values = []
        if not isinstance(values, list):
            raise RowError(
                f"{where}: column {column!r} must be a list, got {type(values).__name__}.",
                reason="bad_media_column",
            )
        queues[kind] = [_ref(kind, v, f"{where}, {column}[{i}]") for i, v in enumerate(values)]  # type: ignore[arg-type]

    counts = {kind: len(queue) for kind, queue in queues.items()}
    messages: list[dict[str, Any]] = []
    order: list[MediaRef] = []
    for number, message in enumerate(prompt):
        if isinstance(message["content"], list):
            parts = _content_parts(message["content"], f"{where}, {prompt_key}[{number}]")
            order.extend(part[part["type"]] for part in parts if part["type"] != "text")
            messages.append({"role": message["role"], "content": parts})
            continue
        text: str = message["content"]
        if not _SPLIT.search(text):
            messages.append({"role": message["role"], "content": text})
            continue
        parts = []
        for segment in _SPLIT.split(text):
            if not segment:
                continue
            placed = _KIND_OF.get(segment)
            if placed is None:
                parts.append({"type": "text", "text": segment})
                continue
            if not queues[placed]:
                raise RowError(
                    f"{where}: the prompt has more {PLACEHOLDERS[placed]} placeholders than "
                    f"{MEDIA_COLUMNS[placed]!r} entries ({counts[placed]}).",
                    reason="media_count_mismatch",
                )
            ref = queues[placed].pop(0)
            order.append(ref)
            parts.append({"type": placed, placed: ref})
        messages.append({"role": message["role"], "content": parts})
    leftover = {MEDIA_COLUMNS[k]: len(q) for k, q in queues.items() if q}
    if leftover:
        raise RowError(
            f"{where}: {leftover} media entries have no placeholder in the prompt; put one "
            "<image>/<audio>/<video> in the message text per entry.",
            reason="media_count_mismatch",
        )
    fields = {k: v for k, v in raw.items() if k != prompt_key and k not in MEDIA_COLUMNS.values()}
    return ParsedRow(messages=messages, media=tuple(order), fields=fields)


def soundtracks_as_audio(parsed: ParsedRow, *, where: str) -> ParsedRow:
    """``parsed`` with an audio part right after each video part, naming the video's file: each
    video's soundtrack heard as an audio item of its own (the video's own audio tokens, placed
    after its frames, not interleaved with them; verl-omni's ``NextQARLHFDataset``). The media
    decoder reads an audio entry that names a video file as that file's audio stream.

    Raises:
        RowError: reason ``no_soundtrack``: a video given as frame images, which carry no sound.
    """
    messages: list[dict[str, Any]] = []
    for message in parsed.messages:
        content = message["content"]
        if isinstance(content, str):
            messages.append(message)
            continue
        parts: list[dict[str, Any]] = []
        for part in content:
            parts.append(part)
            if part["type"] != "video":
                continue
            video: MediaRef = part["video"]
            if video.path is None or video.frames is not None:
                raise RowError(f"{where}: the video is {video.describe()}, which has no soundtrack to hear "
                               "(data.soundtrack_as_audio is on). Give the video file, or turn the switch off.",
                               reason="no_soundtrack")
            parts.append({"type": "audio", "audio": MediaRef("audio", path=video.path)})
        messages.append({"role": message["role"], "content": parts})
    media = tuple(part[part["type"]] for m in messages if isinstance(m["content"], list)
                  for part in m["content"] if part["type"] != "text")
    return ParsedRow(messages=messages, media=media, fields=parsed.fields)


def _part_ref(kind: MediaKind, part: Mapping[str, Any], where: str) -> MediaRef:
    """The medium of a content part: ``{"type": kind, kind: entry}`` or the part itself as a
    media dict (``{"type": "image", "image": path, "max_pixels": ...}``)."""
    value = part.get(kind)
    if isinstance(value, Mapping):
        return _ref(kind, value, where)
    return _ref(kind, {k: v for k, v in part.items() if k != "type"}, where)


def _content_parts(content: list[Any], where: str) -> list[dict[str, Any]]:
    """A message given as content parts, media inside (verl passes such messages on as they are)."""
    if not content:
        raise RowError(f"{where}: a message's content list is empty.", reason="bad_prompt")
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind in MEDIA_COLUMNS:
            parts.append({"type": kind, kind: _part_ref(kind, part, f"{where}, part {i}")})
        else:
            raise RowError(
                f"{where}, part {i}: a content part must be {{'type': 'text', 'text': str}} or "
                f"{{'type': 'image' | 'audio' | 'video', ...}}, got {str(part)[:80]!r}.",
                reason="bad_prompt",
            )
    return parts


def raw_prompt(parsed: ParsedRow) -> list[dict[str, Any]]:
    """The messages with each medium shown as its path (or ``{"bytes", "path"}``, or a dict
    with its settings), safe to log or ship; :func:`media_in_messages` reads them back."""
    out: list[dict[str, Any]] = []
    for message in parsed.messages:
        content = message["content"]
        if isinstance(content, list):
            content = [
                {**part, part["type"]: _shown(part[part["type"]])} if part["type"] != "text" else part
                for part in content
            ]
        out.append({"role": message["role"], "content": content})
    return out


def media_in_messages(messages: list[dict[str, Any]], *, where: str) -> tuple[MediaRef, ...]:
    """The media of :func:`raw_prompt` messages, in prompt order, as references again.

    verl's agent loop hands a rollout back the ``raw_prompt`` of a row; this recovers what
    :func:`parse_row` found, so both engines decode the same files.

    Raises:
        RowError: a media part holds none of the forms :func:`parse_row` reads.
    """
    refs: list[MediaRef] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            kind = part.get("type")
            if kind in MEDIA_COLUMNS:
                refs.append(_part_ref(kind, part, where))
    return tuple(refs)


def _shown(ref: MediaRef) -> Any:
    if ref.frames is not None:
        shown: Any = [_shown(frame) for frame in ref.frames]
    elif ref.data is None:
        shown = ref.path
    else:
        return {"bytes": ref.data, "path": ref.path, **dict(ref.options)}
    return {ref.kind: shown, **dict(ref.options)} if ref.options else shown
