"""Entry point of the ``omni_rl.models`` group: importing it registers both adapters."""

from omni_qwen25.rollout_adapter import Qwen25OmniRolloutAdapter
from omni_qwen25.training_adapter import Qwen25OmniThinkerAdapter

__all__ = ["Qwen25OmniRolloutAdapter", "Qwen25OmniThinkerAdapter"]
