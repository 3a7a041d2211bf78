"""What a checkpoint's ``config.json`` and an RL data file say, read once per process and again
only when the file changes: before a run is resolved (the config's pipeline name), by
:mod:`omni_trainer.resolved`, and in verl's worker processes. A file that cannot be read
carries the reason, which the pre-flight reports."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni_contracts import TrainingAdapter

NOT_A_CHECKPOINT = (
    "is not a directory. Point it at a local Hugging Face checkpoint (download one with "
    "`hf download <org>/<name> --local-dir <dir>`; `uv run trainer tiny` builds a tiny one)"
)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint directory's ``config.json`` (``problem`` says why there is none)."""

    path: str
    config: dict[str, Any] | None
    problem: str | None = None

    def adapter(self, stage: str, options: dict[str, Any] | None = None) -> TrainingAdapter:
        """The training adapter its architecture and ``stage`` select.

        Raises:
            OmniContractError: no installed model package serves it.
        """
        from omni_contracts import resolve_training_adapter

        assert self.config is not None, self.problem
        return resolve_training_adapter(self.config, stage, options)


@dataclass(frozen=True)
class DataFile:
    """An RL parquet file's row count and data sources (``problem`` says why they are unknown)."""

    path: str
    rows: int = 0
    data_sources: frozenset[str] = field(default_factory=frozenset)
    problem: str | None = None


def _stamp(path: Path) -> tuple[int, int] | None:
    """What changes when the file does (a test may rewrite one between runs of one process)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def checkpoint(path: str) -> Checkpoint:
    return _checkpoint(path, _stamp(Path(path).expanduser() / "config.json"))


def data_file(path: str) -> DataFile:
    return _data_file(path, _stamp(Path(path).expanduser()))


@functools.cache
def _checkpoint(path: str, stamp: tuple[int, int] | None) -> Checkpoint:
    directory = Path(path).expanduser()
    if not directory.is_dir():
        return Checkpoint(path, None, NOT_A_CHECKPOINT)
    config_file = directory / "config.json"
    try:
        loaded = json.loads(config_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Checkpoint(path, None, "has no config.json; point it at a Hugging Face checkpoint directory")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Checkpoint(path, None, f"cannot read {config_file} ({_one_line(exc)})")
    return Checkpoint(path, loaded if isinstance(loaded, dict) else {})


@functools.cache
def _data_file(path: str, stamp: tuple[int, int] | None) -> DataFile:
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    file = Path(path).expanduser()
    if not file.is_file():
        return DataFile(path, problem=f"{path} does not exist (convert a dataset with `uv run trainer convert ...`)")
    try:
        parquet = pq.ParquetFile(file)
        rows = parquet.metadata.num_rows
        if "data_source" not in parquet.schema_arrow.names:
            return DataFile(path, rows, problem=f"{path} has no data_source column; is it an RL parquet "
                                                "(`uv run trainer convert ...` writes one)?")
        column = parquet.read(columns=["data_source"]).column("data_source")
    except Exception as exc:  # pyarrow raises several types for a file that is not parquet
        return DataFile(path, problem=f"cannot read {path} as parquet ({_one_line(exc)})")
    return DataFile(path, rows, frozenset(value for value in column.to_pylist() if isinstance(value, str)))
