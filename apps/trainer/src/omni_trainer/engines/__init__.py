"""The training engines behind ``trainer.engine``: one small interface, one entry each.

An :class:`Engine` readies the loaded config (:meth:`Engine.prepare`), brings its own
pre-flight checks (run after the common ones in :mod:`omni_trainer.preflight`), says what
``trainer doctor`` adds to the memory plan, and runs a checked run (:class:`~omni_trainer.resolved.ResolvedRun`,
resolved once by the CLI and passed to both). ``local`` is omni-rl's own loop
(:mod:`omni_trainer.engines.local`); ``verl`` launches verl's trainer
(:mod:`omni_trainer.engines.verl`). Each is a package here whose ``__init__`` holds its
``ENGINE``; a new engine is one more, and a line in :data:`ENGINE_MODULES`. An engine's entry
imports its heavy dependencies only when it runs, and the engines never import each other
(import-linter's ``engines-independent`` contract).
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from omni_contracts import TrainingAdapter

from omni_trainer.config import Config, ConfigError
from omni_trainer.findings import Check
from omni_trainer.gpu_plan import Gpu
from omni_trainer.interrupts import StopRequest
from omni_trainer.resolved import ResolvedRun


class Engine(Protocol):
    """What ``trainer`` needs of an engine."""

    name: str
    checks: tuple[Check, ...]
    """The engine's own pre-flight checks: what it refuses or cannot honour, by key."""
    marks_start_up: bool
    """Whether the engine clears :attr:`StopRequest.starting` when its first step begins, so
    that a Ctrl-C before it can be reported as having trained nothing."""
    scale_out: str | None
    """What a run that does not fit one GPU can move to (``None``: the engine spans GPUs itself)."""

    def prepare(self, config: Config) -> list[str]:
        """Ready the loaded config in place before it is resolved and checked (the verl engine
        reads files: the embedded default's are written here); returns notes to print.

        Raises:
            ConfigError: what cannot be readied.
        """
        ...

    def memory_notes(self, config: Config, hf_config: Any, adapter: TrainingAdapter, gpu: Gpu | None) -> list[str]:
        """What ``trainer doctor`` adds to the one-GPU memory plan for this engine."""
        ...

    def run(self, run: ResolvedRun, stop: StopRequest) -> int:
        """Train ``run`` (checked by the pre-flight, its run directory locked); returns the
        process exit code."""
        ...


ENGINE_MODULES = {"local": "omni_trainer.engines.local", "verl": "omni_trainer.engines.verl"}
"""``trainer.engine`` -> the module whose ``ENGINE`` it is."""


def engine_for(name: str) -> Engine:
    """The engine ``trainer.engine=name`` selects.

    Raises:
        ConfigError: no engine has that name.
    """
    if name not in ENGINE_MODULES:
        raise ConfigError(f"trainer.engine={name!r}; valid: {', '.join(sorted(ENGINE_MODULES))}")
    engine: Engine = importlib.import_module(ENGINE_MODULES[name]).ENGINE
    return engine
