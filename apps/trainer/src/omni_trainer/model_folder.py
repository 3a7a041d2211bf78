"""A model directory: checked before anything loads, and recognised by what it holds.

- :func:`folder_problems` is the pre-flight's look at ``actor_rollout_ref.model.path`` (and a
  distillation teacher's): a tokenizer with its vocabulary, a chat template, weights, no
  weight file cut short, no index naming shards that are not there. transformers itself
  loads such folders without a word or fails deep inside loading: without ``tokenizer.json``
  (or the files one is built from) it builds a tokenizer of the special tokens alone, which
  encodes every prompt as nothing, and the run "trains" and exits 0.
- ``omni_contracts.require_usable_tokenizer`` refuses such a tokenizer once loaded, whatever the files.
- :func:`model_fingerprint` digests what the folder holds, so a run resumed through a
  symlink or a copy of its model is recognised, and another model at the same path is not
  (:func:`same_model`).

Reads small files and headers only; no torch, no transformers.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zipfile
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

TOKENIZER_FILE_SETS: tuple[tuple[str, ...], ...] = (
    ("tokenizer.json",),
    ("vocab.json", "merges.txt"),
    ("tokenizer.model",),
    ("spiece.model",),
    ("sentencepiece.bpe.model",),
    ("vocab.txt",),
)
"""Files a transformers tokenizer is built from (any one set, or a ``*.tiktoken`` file)."""
TEMPLATE_FILES = ("chat_template.json", "chat_template.jinja")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
SAMPLE_BYTES = 64
"""Bytes read at the start, middle and end of every tensor for :func:`model_fingerprint`."""


# --- the pre-flight ------------------------------------------------------------------------------


def folder_problems(key: str, path: str) -> list[str]:
    """What stops a run from training the checkpoint directory ``path`` (the config key
    ``key`` names it), each with the fix; empty when nothing does. The caller has checked
    that ``path`` is a directory with a readable ``config.json``."""
    directory = Path(path).expanduser()
    where = f"{key}={path}"
    return [f"{where}: {problem}" for problem in (
        *_tokenizer_problems(directory), *_template_problems(directory), *_weight_problems(directory),
    )]


def _tokenizer_problems(directory: Path) -> list[str]:
    tokenizer_json = directory / "tokenizer.json"
    if tokenizer_json.is_file():
        problem = _tokenizer_json_problem(tokenizer_json)
        return [problem] if problem else []
    if any(all((directory / name).is_file() for name in names) for names in TOKENIZER_FILE_SETS[1:]):
        return []
    if any(directory.glob("*.tiktoken")):
        return []
    return [
        "has no tokenizer.json (nor vocab.json with merges.txt, tokenizer.model, vocab.txt or a *.tiktoken "
        "file). transformers would build a tokenizer of the special tokens alone, which encodes every prompt "
        "as nothing. Copy the model's tokenizer files (tokenizer.json, tokenizer_config.json) into the directory"
    ]


def _tokenizer_json_problem(file: Path) -> str | None:
    try:
        loaded = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return f"cannot read tokenizer.json ({_one_line(exc)}); copy the model's tokenizer.json again"
    model = loaded.get("model") if isinstance(loaded, dict) else None
    if not isinstance(model, dict):
        return "tokenizer.json has no 'model' section (is it a tokenizers file?); copy the model's tokenizer.json again"
    vocab = model.get("vocab")
    if vocab is not None and not vocab:
        added = len(loaded.get("added_tokens") or [])
        return (
            f"tokenizer.json has an empty vocabulary (only its {added} added tokens), so every prompt "
            "encodes as nothing; it was saved from a tokenizer loaded without its files. Copy the model's "
            "own tokenizer.json into the directory"
        )
    return None


def _template_problems(directory: Path) -> list[str]:
    config_file = directory / "tokenizer_config.json"
    if config_file.is_file():
        try:
            tokenizer_config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            return [f"cannot read tokenizer_config.json ({_one_line(exc)}); copy the model's file again"]
        if isinstance(tokenizer_config, dict) and tokenizer_config.get("chat_template"):
            return []
    template_json = directory / "chat_template.json"
    if template_json.is_file():
        try:
            if json.loads(template_json.read_text(encoding="utf-8")).get("chat_template"):
                return []
        except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
            return [f"cannot read chat_template.json ({_one_line(exc)}); copy the model's file again"]
    jinja = directory / "chat_template.jinja"
    if jinja.is_file() and jinja.read_text(encoding="utf-8").strip():
        return []
    return [
        "has no chat template: tokenizer_config.json has no 'chat_template', and there is no (non-empty) "
        "chat_template.json or chat_template.jinja. Every prompt is templated as a chat; copy the model's "
        "chat_template.json (or .jinja) into the directory"
    ]


def _weight_problems(directory: Path) -> list[str]:
    problems: list[str] = []
    checked: set[str] = set()
    indexes = [directory / name for name in INDEX_FILES if (directory / name).is_file()]
    for index in indexes:
        shards, problem = _index_shards(index)
        if problem:
            problems.append(problem)
            continue
        missing = sorted(name for name in shards if not (directory / name).is_file())
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            problems.append(
                f"{index.name} names {len(missing)} weight file(s) that are not in the directory ({shown}); "
                "download them (an interrupted download or copy?)"
            )
        for name in sorted(set(shards) - set(missing)):
            checked.add(name)
            problems.extend(_weight_file_problems(directory / name))
    for name in WEIGHT_FILES:
        if (directory / name).is_file() and name not in checked:
            problems.extend(_weight_file_problems(directory / name))
    if not indexes and not any((directory / name).is_file() for name in WEIGHT_FILES):
        loose = sorted(p.name for p in directory.glob("*.safetensors"))
        hint = f" ({', '.join(loose[:3])} without their model.safetensors.index.json)" if loose else ""
        problems.append(
            f"has no weights{hint}: transformers loads model.safetensors, or model.safetensors.index.json and "
            "the shards it names (or pytorch_model.bin). Copy the model's weight files into the directory"
        )
    return problems


def _index_shards(index: Path) -> tuple[set[str], str | None]:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        return set(), f"cannot read {index.name} ({_one_line(exc)}); copy the model's file again"
    if not isinstance(weight_map, dict) or not weight_map:
        return set(), f"{index.name} has no 'weight_map'; copy the model's file again"
    return {str(name) for name in weight_map.values()}, None


def _weight_file_problems(file: Path) -> list[str]:
    if file.suffix == ".safetensors":
        problem = safetensors_problem(file)
    else:
        problem = _zip_problem(file)
    return [f"{file.name} {problem}; download it again (an interrupted download or copy?)"] if problem else []


def safetensors_problem(file: Path) -> str | None:
    """Why ``file`` is not a whole safetensors file (its header gives every tensor's byte
    range, so a cut-short file is caught without reading the tensors), or ``None``."""
    size = file.stat().st_size
    try:
        header_length, header = _safetensors_header(file)
    except ValueError as exc:
        return str(exc)
    ends = [
        int(info["data_offsets"][1]) for name, info in header.items()
        if name != "__metadata__" and isinstance(info, dict) and len(info.get("data_offsets") or ()) == 2
    ]
    expected = 8 + header_length + max(ends, default=0)
    if size < expected:
        return f"is truncated: its header promises {expected:,} bytes, the file has {size:,}"
    if size > expected:
        return f"is damaged: it has {size - expected:,} bytes past its last tensor"
    return None


def _safetensors_header(file: Path) -> tuple[int, dict[str, Any]]:
    size = file.stat().st_size
    with file.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise ValueError(f"is truncated: {size} bytes, shorter than a safetensors header")
        (length,) = struct.unpack("<Q", prefix)
        if 8 + length > size:
            raise ValueError(f"is truncated: its header alone needs {8 + length:,} bytes, the file has {size:,}")
        raw = handle.read(length)
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"has an unreadable header ({_one_line(exc)})") from exc
    if not isinstance(header, dict):
        raise ValueError("has an unreadable header (not a JSON object)")
    return length, header


def _zip_problem(file: Path) -> str | None:
    """A ``torch.save`` file (a zip since torch 1.6) whose end, the zip directory, is missing."""
    with file.open("rb") as handle:
        is_zip = handle.read(4) == b"PK\x03\x04"
    if is_zip and not zipfile.is_zipfile(file):
        return "is truncated: the zip archive torch.save writes lacks its end"
    return None


# --- identity by content -------------------------------------------------------------------------


def model_fingerprint(path: str | os.PathLike[str]) -> str | None:
    """A digest of the checkpoint at ``path``: ``config.json``, and for every weight file its
    name, size, safetensors header (names, dtypes, shapes, offsets) and the first, middle and
    last :data:`SAMPLE_BYTES` bytes of each tensor (any other weight file: bytes at 16 even
    offsets). A copy or a symlink of a checkpoint has its digest; a fine-tune of it changes
    the sampled bytes of every tensor it changed. ``None`` when ``path`` holds no config.json.
    Reads headers and samples only (a 30B checkpoint: a few MB); cached per file sizes and
    modification times."""
    directory = Path(path).expanduser()
    if not (directory / "config.json").is_file():
        return None
    files = tuple(_fingerprinted_files(directory))
    signature = tuple((file.name, *_stat(file)) for file in files)
    return _fingerprint(str(directory.resolve()), signature)


def same_model(saved: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether a checkpoint's recorded model (``path``, and ``model``: its
    :func:`model_fingerprint` when recorded) is this run's: equal digests, whatever the paths.
    A checkpoint recorded before digests were: its path, or the digest of what is at its
    path now."""
    saved_digest, digest = saved.get("model"), current.get("model")
    if saved_digest is not None and digest is not None:
        return bool(saved_digest == digest)
    if saved.get("path") == current.get("path"):
        return True
    if "model" not in saved and saved.get("path") and digest is not None:
        return model_fingerprint(str(saved["path"])) == digest
    return False


def _fingerprinted_files(directory: Path) -> Iterator[Path]:
    yield directory / "config.json"
    for file in sorted(directory.iterdir()):
        if file.is_file() and (file.suffix in WEIGHT_SUFFIXES or file.name in INDEX_FILES):
            yield file


def _stat(file: Path) -> tuple[int, int]:
    stat = file.stat()
    return stat.st_size, stat.st_mtime_ns


@lru_cache(maxsize=8)
def _fingerprint(directory: str, signature: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, size, _ in signature:
        file = Path(directory) / name
        digest.update(f"{name}\0{size}\0".encode())
        if file.suffix == ".safetensors":
            _digest_safetensors(digest, file)
        elif file.suffix in WEIGHT_SUFFIXES:
            _digest_samples(digest, file, [size * k // 16 for k in range(16)])
        else:
            digest.update(file.read_bytes())
    return digest.hexdigest()


def _digest_safetensors(digest: Any, file: Path) -> None:
    try:
        length, header = _safetensors_header(file)
    except ValueError:
        _digest_samples(digest, file, [0])
        return
    digest.update(json.dumps(header, sort_keys=True).encode())
    start = 8 + length
    offsets = []
    for name in sorted(header):
        info = header[name]
        if name == "__metadata__" or not isinstance(info, dict) or len(info.get("data_offsets") or ()) != 2:
            continue
        begin, end = (start + int(value) for value in info["data_offsets"])
        offsets += [begin, (begin + end) // 2, max(begin, end - SAMPLE_BYTES)]
    _digest_samples(digest, file, offsets)


def _digest_samples(digest: Any, file: Path, offsets: list[int]) -> None:
    with file.open("rb") as handle:
        for offset in offsets:
            handle.seek(offset)
            digest.update(handle.read(SAMPLE_BYTES))


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
