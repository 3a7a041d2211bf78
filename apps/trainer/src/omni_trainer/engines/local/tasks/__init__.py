"""The local engine's tasks by name (:func:`omni_trainer.tasks.task_name`). Each task's module is
imported when it is built: it brings its own heavy dependencies (torch, the sampler, a teacher)."""

from __future__ import annotations

from omni_contracts import Registry

from omni_trainer.engines.local.task import LoadedRun, Task, TaskFactory
from omni_trainer.tasks import DISTILLATION, PREFERENCE, SPEECH_RL, TEXT_RL

LOCAL_TASKS: Registry[str, TaskFactory] = Registry("task")
"""A task name (:func:`task_name`) -> what builds it on the local engine (imported when used)."""


@LOCAL_TASKS.register(TEXT_RL)
def _text_rl(run: LoadedRun) -> Task:
    from omni_trainer.engines.local.tasks.text_rl import TextRL

    return TextRL(run)


@LOCAL_TASKS.register(SPEECH_RL)
def _speech_rl(run: LoadedRun) -> Task:
    from omni_trainer.engines.local.tasks.speech_rl import SpeechRL

    return SpeechRL(run)


@LOCAL_TASKS.register(DISTILLATION)
def _distillation(run: LoadedRun) -> Task:
    from omni_trainer.engines.local.tasks.distillation import Distillation

    return Distillation(run)


@LOCAL_TASKS.register(PREFERENCE)
def _preference(run: LoadedRun) -> Task:
    from omni_trainer.engines.local.tasks.preference import OfflinePreference

    return OfflinePreference(run)


def load_task(run: LoadedRun) -> Task:
    """The task ``run.config`` asks for, on the local engine."""
    return LOCAL_TASKS.get(run.resolved.task)(run)
