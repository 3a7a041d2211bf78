"""Entry point of the ``omni_rl.models`` group: importing it registers the adapters."""

from omni_qwen3.rollout_adapter import Qwen3OmniRolloutAdapter
from omni_qwen3.talker_adapter import Qwen3OmniTalkerAdapter
from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter

__all__ = ["Qwen3OmniRolloutAdapter", "Qwen3OmniTalkerAdapter", "Qwen3OmniThinkerAdapter"]
