"""The training adapter's processor inside verl's processes.

verl builds its own processor with ``AutoProcessor`` and, for processors it does not know
(``Qwen3OmniMoeProcessor`` among them), gets ``None``: verl's agent loop then ships no
media features to the actor and falls back to 1-D positions. Every verl process that
templates, tokenizes or computes positions uses this one instead: the adapter's
``configure_processor`` (Qwen3-Omni: bound to the thinker config, int64 mrope
``get_rope_index`` and the audio/video arguments verl's ``get_rope_index_kwargs`` hook asks for).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from omni_contracts import load_processor

from omni_verl.adapters import training_adapter
from omni_verl.settings import VerlSettings


@lru_cache(maxsize=4)
def adapter_processor(settings: VerlSettings) -> Any:
    """The run's processor (one per process and settings; loading it takes seconds)."""
    from transformers import AutoConfig

    hf_config = AutoConfig.from_pretrained(settings.model_path)
    adapter = training_adapter(hf_config, settings)
    return load_processor(adapter, settings.model_path, hf_config)
