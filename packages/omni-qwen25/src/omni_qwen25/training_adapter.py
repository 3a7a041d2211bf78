"""Training adapter for the Qwen2.5-Omni Thinker.

The checkpoint holds the thinker (text, vision and audio in; text out), the talker and the
token2wav vocoder (a DiT and a BigVGAN). RL trains the thinker only: the engines load
:class:`omni_qwen25.thinker_policy.Qwen25OmniThinkerPolicy`, which builds the thinker alone
(the checkpoint's top-level class has no ``forward`` of its own); the rest is the model
kit's (:class:`omni_model_kit.thinker_adapter.OmniThinkerAdapter`).
"""

from __future__ import annotations

from omni_contracts import TrainingAdapter
from omni_model_kit.thinker_adapter import OmniThinkerAdapter

from omni_qwen25.rollout_adapter import PIPELINE

ARCHITECTURE = "Qwen2_5OmniForConditionalGeneration"


@TrainingAdapter.register(ARCHITECTURE, stage="thinker")
class Qwen25OmniThinkerAdapter(OmniThinkerAdapter):
    """Trains the thinker of ``Qwen2_5OmniForConditionalGeneration``."""

    lora_exclude_modules = r".*(visual|audio_tower|lm_head|talker|token2wav).*"
    rollout_pipeline = PIPELINE
    policy_path = "omni_qwen25.thinker_policy.Qwen25OmniThinkerPolicy"
    processor_path = "omni_qwen25.processor.Qwen25OmniThinkerProcessor"
