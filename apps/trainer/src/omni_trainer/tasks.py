"""What a run trains for, named from its config: both engines and the pre-flight ask
:func:`task_name`. The local engine's half of each task is :mod:`omni_trainer.engines.local.tasks`;
the verl engine translates the online ones (:mod:`omni_trainer.engines.verl.translate`) and drives
offline preference runs itself (:mod:`omni_trainer.engines.verl.preference`)."""

from __future__ import annotations

from omni_trainer.config import Config

TEXT_RL = "rl"
SPEECH_RL = "speech_rl"
DISTILLATION = "distillation"
PREFERENCE = "preference"


def task_name(config: Config) -> str:
    """The task ``config`` asks for: offline preference optimisation
    (``algorithm.sample_source=offline``), RL of the stage that speaks
    (``model.stage=talker``), on-policy distillation (``distillation.enabled``), else RL on text."""
    if config.algorithm.sample_source == "offline":
        return PREFERENCE
    if config.actor_rollout_ref.model.stage == "talker":
        return SPEECH_RL
    if config.distillation.enabled:
        return DISTILLATION
    return TEXT_RL


