"""Build the trainable policy from a checkpoint through its training adapter.

Order (the contract's): register auto classes -> load -> ``configure_model`` (strip,
redirect, freeze) -> LoRA injection. FSDP wrapping, when an engine does it, comes after.
"""

from __future__ import annotations

from typing import Any

import torch

from omni_contracts import TrainingAdapter
from omni_training.settings import LoraSettings

DEFAULT_AUTO_CLASS = "AutoModelForMultimodalLM"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def load_policy(
    model_path: str, adapter: TrainingAdapter, lora: LoraSettings, *, dtype: str = "float32"
) -> tuple[Any, Any]:
    """``(model, model_config)``: the configured model, LoRA-wrapped when ``lora.rank > 0``."""
    import transformers

    adapter.register_auto_classes()
    config = transformers.AutoConfig.from_pretrained(model_path)
    auto_class = getattr(transformers, adapter.auto_model_class or DEFAULT_AUTO_CLASS)
    model = auto_class.from_pretrained(model_path, dtype=DTYPES[dtype])
    adapter.configure_model(model, config)
    if lora.rank > 0:
        model = apply_lora(model, adapter, lora)
    return model, config


def apply_lora(model: Any, adapter: TrainingAdapter, lora: LoraSettings) -> Any:
    """Wrap ``model`` with PEFT LoRA; targets default to the adapter's.

    Raises:
        ValueError: neither the settings nor the adapter name target modules.
    """
    import peft

    targets = lora.target_modules or adapter.lora_target_modules
    if not targets:
        raise ValueError(
            f"LoRA rank {lora.rank} needs target modules: set actor_rollout_ref.model.target_modules "
            f"or give {type(adapter).__name__} a lora_target_modules default."
        )
    config = peft.LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(targets) if not isinstance(targets, str) else targets,
        exclude_modules=lora.exclude_modules or adapter.lora_exclude_modules,
    )
    return peft.get_peft_model(model, config)
