"""The run's adapters, resolved inside verl's processes from the exported settings."""

from __future__ import annotations

import inspect
from typing import Any

from omni_contracts import RolloutAdapter, TrainingAdapter, get_rollout_adapter, get_training_adapter

from omni_trainer.verl_engine.settings import VerlSettings


def training_adapter(hf_config: Any, settings: VerlSettings) -> TrainingAdapter:
    """The adapter for the checkpoint's ``architectures[0]`` and the configured stage, with
    the freeze flags applied where its constructor takes them."""
    architecture = (getattr(hf_config, "architectures", None) or ["<none>"])[0]
    adapter_cls = type(get_training_adapter(architecture, settings.stage))
    wanted = {
        "freeze_vision_tower": settings.freeze_vision_tower,
        "freeze_audio_tower": settings.freeze_audio_tower,
    }
    accepted = inspect.signature(adapter_cls).parameters
    return adapter_cls(**{k: v for k, v in wanted.items() if k in accepted})


def rollout_adapter(settings: VerlSettings) -> RolloutAdapter:
    adapter = get_rollout_adapter(settings.pipeline_name)
    adapter.check_mode(settings.pipeline_mode)
    return adapter
