"""Parsing one RL parquet row into chat messages with media references (nothing decoded).

A parsed row keeps media as paths or bytes; decoding happens in :mod:`omni_data.media`
when a worker encodes the row.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from omni_data.errors import RowError
from omni_data.schema import MEDIA_COLUMNS, PLACEHOLDERS

MediaKind = Literal["image", "audio", "video"]
_SPLIT = re.compile("(" + "|".join(re.escape(p) for p in PLACEHOLDERS.values()) + ")")
_KIND_OF = {placeholder: kind for kind, placeholder in PLACEHOLDERS.items()}


@dataclass(frozen=True)
class MediaRef:
    """One medium as stored in the parquet: a file path, inline bytes, or video frames."""

    kind: MediaKind
    path: str | None = None
    data: bytes | None = None
    frames: tuple[MediaRef, ...] | None = None

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


def _ref(kind: MediaKind, value: object, where: str) -> MediaRef:
    if isinstance(value, str) and value:
        return MediaRef(kind, path=value)
    if isinstance(value, Mapping):
        data, path = value.get("bytes"), value.get("path")
        if isinstance(data, bytes) and data:
            return MediaRef(kind, path=path if isinstance(path, str) else None, data=data)
        if isinstance(path, str) and path:
            return MediaRef(kind, path=path)
    if kind == "video" and isinstance(value, list) and value:
        return MediaRef(kind, frames=tuple(_ref("image", frame, where) for frame in value))
    accepted = {
        "image": "a path or {'bytes', 'path'}",
        "audio": "a path or {'bytes', 'path'}",
        "video": "a path or a list of frame images",
    }[kind]
    raise RowError(
        f"{where}: a {kind} entry must be {accepted}, got {type(value).__name__} {str(value)[:80]!r}.",
        reason="bad_media_column",
    )


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
        isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in prompt
    ):
        raise RowError(
            f"{where}: column {prompt_key!r} must be a non-empty list of "
            f"{{'role': str, 'content': str}} messages, got {str(prompt)[:120]!r}.",
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
    for message in prompt:
        text: str = message["content"]
        if not _SPLIT.search(text):
            messages.append({"role": message["role"], "content": text})
            continue
        parts: list[dict[str, Any]] = []
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


def raw_prompt(parsed: ParsedRow) -> list[dict[str, Any]]:
    """The messages with each medium shown as its path (or ``<bytes>``), safe to log or ship."""
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
        RowError: a media part holds neither a path, ``{"bytes", "path"}`` nor frames.
    """
    refs: list[MediaRef] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            kind = part.get("type")
            if kind in MEDIA_COLUMNS:
                refs.append(_ref(kind, part.get(kind), where))
    return tuple(refs)


def _shown(ref: MediaRef) -> Any:
    if ref.frames is not None:
        return [_shown(frame) for frame in ref.frames]
    return ref.path if ref.data is None else {"bytes": ref.data, "path": ref.path}
