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
FALLBACK_AUTO_CLASS = "AutoModelForCausalLM"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def load_policy(
    model_path: str, adapter: TrainingAdapter, lora: LoraSettings, *, dtype: str = "float32"
) -> tuple[Any, Any]:
    """``(model, model_config)``: the configured model, LoRA-wrapped when ``lora.rank > 0``."""
    import transformers

    adapter.register_auto_classes()
    config = transformers.AutoConfig.from_pretrained(model_path)
    model = _from_pretrained(model_path, adapter, config, dtype)
    adapter.configure_model(model, config)
    if lora.rank > 0:
        model = apply_lora(model, adapter, lora)
    return model, config


def _from_pretrained(model_path: str, adapter: TrainingAdapter, config: Any, dtype: str) -> Any:
    """Load through the adapter's ``auto_model_class``; without one, through
    :data:`DEFAULT_AUTO_CLASS`, falling back to ``AutoModelForCausalLM`` for a text-only
    causal LM the multimodal auto class does not own.

    Raises:
        ValueError: no auto class owns the checkpoint's config class (names the adapter
            attribute that fixes it).
    """
    import transformers

    names = [adapter.auto_model_class] if adapter.auto_model_class else [DEFAULT_AUTO_CLASS, FALLBACK_AUTO_CLASS]
    for name in names:
        try:
            return getattr(transformers, name).from_pretrained(model_path, dtype=DTYPES[dtype])
        except ValueError as exc:
            if "Unrecognized configuration class" not in str(exc):
                raise
    raise ValueError(
        f"No transformers auto class among {', '.join(names)} loads {type(config).__name__} "
        f"(the checkpoint at {model_path}). Set `auto_model_class` on {type(adapter).__name__} "
        "to the auto class that owns this architecture (e.g. 'AutoModelForImageTextToText')."
    )


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
