"""verl's single-turn agent loop with the training adapter's processor.

verl's agent loop templates and tokenizes prompts with ``AutoProcessor``; a model
package's ``configure_processor`` (Qwen3-Omni: the thinker config, int64 mrope index,
pad-token dedup) must be the one used, as the local engine uses it. Registered as
``omni_single_turn_agent`` through verl's agent-loop registry.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from verl.experimental.agent_loop.agent_loop import register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from omni_trainer.verl_engine.adapters import training_adapter
from omni_trainer.verl_engine.settings import VerlSettings


@lru_cache(maxsize=1)
def adapter_processor(settings: VerlSettings) -> Any:
    from transformers import AutoConfig

    hf_config = AutoConfig.from_pretrained(settings.model_path)
    return training_adapter(hf_config, settings).configure_processor(settings.model_path, hf_config)


@register("omni_single_turn_agent")
class OmniSingleTurnAgentLoop(SingleTurnAgentLoop):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["processor"] = adapter_processor(VerlSettings.from_env())
        super().__init__(*args, **kwargs)
