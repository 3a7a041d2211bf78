"""The run, resolved once: the config with what its files say.

:func:`resolve_run` is called once the config is final (loaded, the embedded default's files
written) and gives a :class:`ResolvedRun`: the config, the task it asks for, each checkpoint's
``config.json`` and the training adapters they select, the rollout adapter, and each data
file's rows and data sources. The CLI passes it to the pre-flight (every check takes it) and to
the engine that runs; they ask it instead of opening the files or resolving the adapters
again. A file that cannot be read carries the reason, which the pre-flight reports. Reading a
file is also cached per process (again only when it changes), for what runs before a run is
resolved (the config's pipeline name) and in verl's worker processes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from omni_contracts import RolloutAdapter, TrainingAdapter

    from omni_trainer.config import Config

T = TypeVar("T")

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


@dataclass(frozen=True)
class ResolvedRun:
    """A config and what its files say (see the module docstring). Build it with
    :func:`resolve_run`; the config must not change afterwards."""

    config: Config
    task: str
    """What the run trains for (:func:`omni_trainer.tasks.task_name`)."""
    model: Checkpoint | None  # None: the embedded tiny model, built when the run starts
    teacher: Checkpoint | None
    train_files: tuple[DataFile, ...]
    val_files: tuple[DataFile, ...]
    _derived: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def data_sources(self) -> set[str]:
        return {source for file in (*self.train_files, *self.val_files) for source in file.data_sources}

    @property
    def stage(self) -> str:
        return self.config.actor_rollout_ref.model.stage

    @property
    def mode(self) -> str:
        """The rollout pipeline's mode (``actor_rollout_ref.rollout.pipeline_mode``)."""
        return self.config.actor_rollout_ref.rollout.pipeline_mode

    def once(self, name: str, build: Callable[[], T]) -> T:
        """``build()``, computed on the first call for this run and kept: what an engine
        derives from the run for both its checks and its launch (verl's translated config)."""
        if name not in self._derived:
            self._derived[name] = build()
        value: T = self._derived[name]
        return value

    def training_adapter(self) -> TrainingAdapter:
        """The model's training adapter (its architecture, ``model.stage``, the adapter options).

        Raises:
            OmniContractError: no installed model package serves it.
        """
        assert self.model is not None, "the embedded model is built when the run starts; use with_model(path)"
        return self._adapter("training_adapter", self.model)

    def teacher_adapter(self) -> TrainingAdapter:
        """The distillation teacher's training adapter (the student's stage and options); raises
        as :meth:`training_adapter` does."""
        assert self.teacher is not None, "no teacher: distillation.enabled is false"
        return self._adapter("teacher_adapter", self.teacher)

    def _adapter(self, name: str, model: Checkpoint) -> TrainingAdapter:
        from omni_trainer.settings_builders import adapter_options

        return self.once(name, lambda: model.adapter(self.stage, adapter_options(self.config)))

    def rollout_adapter(self) -> RolloutAdapter:
        """The adapter of ``actor_rollout_ref.rollout``'s pipeline.

        Raises:
            OmniContractError: no installed package registers that pipeline.
        """
        from omni_contracts import get_rollout_adapter

        return self.once("rollout_adapter", lambda: get_rollout_adapter(self.config.actor_rollout_ref.rollout.pipeline()))

    def with_model(self, path: str) -> ResolvedRun:
        """This run with its model at ``path`` (the embedded tiny model, once built)."""
        return dataclasses.replace(self, model=checkpoint(path), _derived={})


def resolve_run(config: Config) -> ResolvedRun:
    """``config``, resolved: called once its values are final (see the module docstring)."""
    from omni_trainer.tasks import task_name

    teacher = config.distillation.teacher_models.teacher_model.model_path if config.distillation.enabled else None
    model_path = config.actor_rollout_ref.model.path
    return ResolvedRun(
        config,
        task_name(config),
        checkpoint(model_path) if model_path else None,
        checkpoint(teacher) if teacher else None,
        tuple(data_file(path) for path in config.data.train_files or ()),
        tuple(data_file(path) for path in config.data.val_files or ()),
    )
