"""Entry point of the ``omni_rl.models`` group: importing it registers both adapters."""

from omni_qwen3.rollout_adapter import Qwen3OmniRolloutAdapter
from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter

__all__ = ["Qwen3OmniRolloutAdapter", "Qwen3OmniThinkerAdapter"]
