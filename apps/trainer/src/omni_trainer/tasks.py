"""What a run trains for, named from its config, and what that task is for the checks both
engines share: both engines and the pre-flight ask :func:`task_name` and :func:`task_of`. The
local engine's half of each task is :mod:`omni_trainer.engines.local.tasks`; the verl engine's
is :mod:`omni_trainer.engines.verl.tasks` (a test holds the three tables to the same names).
A new task adds its entry to :data:`TASKS`, in the order the predicates are tried."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from omni_trainer.config import Config

TEXT_RL = "rl"
SPEECH_RL = "speech_rl"
DISTILLATION = "distillation"
PREFERENCE = "preference"


@dataclass(frozen=True)
class Task:
    """A task as the shared checks see it."""

    name: str
    selects: Callable[[Config], bool]
    """Whether a config asks for this task (tried in :data:`TASKS`' order)."""
    said_by: str
    """The setting that selects it, as a problem names it."""
    validates: bool = True
    """It scores ``data.val_files`` (a speech stage reports its rewards every step instead)."""
    scored_by_data_source: bool = True
    """Its samples are scored by ``omni_rewards`` per ``data_source`` (not speech, not pairs)."""
    hears_soundtracks: bool = True
    """Its prompts take videos' soundtracks (``data.use_audio_in_video``, ``data.soundtrack_as_audio``)."""
    samples_ahead: bool = False
    """Its rollout may run ahead of the update (``async_training.max_staleness``)."""


TASKS = (
    Task(PREFERENCE, lambda c: c.algorithm.sample_source == "offline", "algorithm.sample_source=offline",
         scored_by_data_source=False, hears_soundtracks=False),
    Task(SPEECH_RL, lambda c: c.actor_rollout_ref.model.stage == "talker", "stage=talker",
         validates=False, scored_by_data_source=False, hears_soundtracks=False),
    Task(DISTILLATION, lambda c: c.distillation.enabled, "distillation.enabled=true"),
    Task(TEXT_RL, lambda c: True, "RL", samples_ahead=True),
)


def task_name(config: Config) -> str:
    """The task ``config`` asks for: offline preference optimisation
    (``algorithm.sample_source=offline``), RL of the stage that speaks
    (``model.stage=talker``), on-policy distillation (``distillation.enabled``), else RL on text."""
    return next(task.name for task in TASKS if task.selects(config))


def task_of(name: str) -> Task:
    return next(task for task in TASKS if task.name == name)
