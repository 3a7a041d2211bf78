"""The run, resolved once: the config with what its files say.

:func:`resolve_run` is called once the config is final (loaded, the embedded default's files
written) and gives a :class:`ResolvedRun`: the config, the task it asks for, each checkpoint's
``config.json`` and the training adapters they select, the rollout adapter, and each data
file's rows and data sources. The CLI passes it to the pre-flight (every check takes it) and to
the engine that runs; they ask it instead of opening the files or resolving the adapters
again. A file that cannot be read carries the reason (:mod:`omni_trainer.files`), which the
pre-flight reports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from omni_trainer.config import Config
from omni_trainer.files import Checkpoint, DataFile, checkpoint, data_file
from omni_trainer.settings_builders import adapter_options
from omni_trainer.tasks import task_name

if TYPE_CHECKING:
    from omni_contracts import RolloutAdapter, TrainingAdapter

T = TypeVar("T")


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
