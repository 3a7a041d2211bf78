"""Training adapter for the Qwen3-Omni Thinker.

The checkpoint holds the thinker (text, vision and audio in; text out), the talker and the
code2wav vocoder. RL trains the thinker only: the engines load
:class:`omni_qwen3.thinker_policy.Qwen3OmniThinkerPolicy`, which builds the thinker alone
(its forward and FSDP units are the thinker's), and the encoders are frozen by default.

Nothing heavy is imported at module import: the entry point only registers the class.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omni_contracts import TrainingAdapter
from omni_contracts.chat_template import load_chat_template

from omni_qwen3.rollout_adapter import PIPELINE
from omni_qwen3.token_ids import complete_thinker_config, missing_token_ids, token_id_problems

ARCHITECTURE = "Qwen3OmniMoeForConditionalGeneration"

# LoRA defaults: attention projections of the thinker's text decoder; never the heads or
# the encoders (their q/k/v names differ, but the exclusions make the intent explicit).
LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
LORA_EXCLUDE_MODULES = r".*(visual|audio_tower|lm_head|talker|code2wav).*"


@TrainingAdapter.register(ARCHITECTURE, stage="thinker")
class Qwen3OmniThinkerAdapter(TrainingAdapter):
    """Trains the thinker of ``Qwen3OmniMoeForConditionalGeneration``.

    Args:
        freeze_vision_tower: keep the vision encoder's weights fixed (default).
        freeze_audio_tower: keep the audio encoder's weights fixed (default).
    """

    lora_target_modules = LORA_TARGET_MODULES
    lora_exclude_modules = LORA_EXCLUDE_MODULES
    options = ("freeze_vision_tower", "freeze_audio_tower")
    rollout_pipeline = PIPELINE
    modalities = ("text", "image", "audio", "video")

    def __init__(self, *, freeze_vision_tower: bool = True, freeze_audio_tower: bool = True) -> None:
        self.freeze_vision_tower = freeze_vision_tower
        self.freeze_audio_tower = freeze_audio_tower

    def policy_class(self, model_config: Any) -> Any:
        from omni_qwen3.thinker_policy import Qwen3OmniThinkerPolicy

        return Qwen3OmniThinkerPolicy

    def get_strip_modules(self, model_config: Any) -> Sequence[str]:
        return ()  # the policy class never builds the talker and code2wav

    def talker_drift_probe(self, model_path: str, model_config: Any) -> Any | None:
        if not getattr(model_config, "enable_audio_output", False):
            return None  # a checkpoint without its talker
        from omni_qwen3.talker_drift import Qwen3OmniTalkerDrift

        return Qwen3OmniTalkerDrift(model_path, self.configure_processor(model_path, model_config))

    def checkpoint_problems(self, model_path: str, model_config: Mapping[str, Any]) -> list[str]:
        """The thinker's media token ids, each set in ``config.json`` (see
        :mod:`omni_qwen3.token_ids`)."""
        if not missing_token_ids(model_config):
            return []
        return token_id_problems(model_config, _added_tokens(Path(model_path)))

    def configure_processor(self, model_path: str, model_config: Any) -> Any:
        from omni_qwen3.processor import load_processor

        return load_processor(model_path, complete_thinker_config(model_config))

    def configure_tokenizer(self, model_path: str, model_config: Any) -> Any:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_path)
        if not tokenizer.chat_template:
            tokenizer.chat_template = load_chat_template(model_path)
        return tokenizer

    def configure_model(self, module: Any, model_config: Any) -> None:
        from omni_qwen3.thinker_policy import Qwen3OmniThinkerPolicy

        if not isinstance(module, Qwen3OmniThinkerPolicy):
            raise TypeError(
                f"{type(self).__name__} trains Qwen3OmniThinkerPolicy (its policy_class), got "
                f"{type(module).__name__}; load the checkpoint with "
                "Qwen3OmniThinkerPolicy.from_pretrained(path)."
            )
        super().configure_model(module, model_config)
        if self.freeze_vision_tower:
            module.thinker.visual.requires_grad_(False)
        if self.freeze_audio_tower:
            module.thinker.audio_tower.requires_grad_(False)


def _added_tokens(model_path: Path) -> dict[str, int]:
    """The tokenizer's added (special) tokens and their ids, from ``tokenizer.json``; empty
    when it cannot be read (the pre-flight reports that file on its own)."""
    try:
        added = json.loads((model_path / "tokenizer.json").read_text(encoding="utf-8")).get("added_tokens") or []
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return {}
    return {t["content"]: t["id"] for t in added if isinstance(t, dict) and isinstance(t.get("id"), int)}

