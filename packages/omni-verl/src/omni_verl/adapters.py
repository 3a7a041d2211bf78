"""The run's adapters, resolved inside verl's processes from the exported settings."""

from __future__ import annotations

from typing import Any

from omni_contracts import RolloutAdapter, TrainingAdapter, get_rollout_adapter, resolve_training_adapter

from omni_verl.settings import VerlSettings


def adapter_options(settings: VerlSettings) -> dict[str, Any]:
    """The options a training adapter may declare (``TrainingAdapter.options``)."""
    return {"freeze_vision_tower": settings.freeze_vision_tower, "freeze_audio_tower": settings.freeze_audio_tower}


def training_adapter(hf_config: Any, settings: VerlSettings) -> TrainingAdapter:
    """The adapter for the checkpoint's ``architectures[0]`` and the configured stage, built
    with the options it declares (the contract's one resolution function)."""
    return resolve_training_adapter(hf_config, settings.stage, adapter_options(settings))


def rollout_adapter(settings: VerlSettings) -> RolloutAdapter:
    adapter = get_rollout_adapter(settings.pipeline_name)
    adapter.check_mode(settings.pipeline_mode)
    return adapter
