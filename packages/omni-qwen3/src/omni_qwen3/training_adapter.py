"""Training adapter for the Qwen3-Omni Thinker.

The checkpoint holds the thinker (text, vision and audio in; text out), the talker and the
code2wav vocoder. RL trains the thinker only: the engines load
:class:`omni_qwen3.thinker_policy.Qwen3OmniThinkerPolicy`, which builds the thinker alone
(its forward and FSDP units are the thinker's); the rest of what Qwen2.5-Omni shares is the
model kit's (:class:`omni_model_kit.thinker_adapter.OmniThinkerAdapter`). Qwen3-Omni's own:
the pre-flight's token-id check, the thinker config completed from the top level, and the
talker drift probe.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omni_contracts import TrainingAdapter
from omni_contracts.speech import TalkerDriftProbe
from omni_model_kit.thinker_adapter import OmniThinkerAdapter

from omni_qwen3.rollout_adapter import PIPELINE
from omni_qwen3.token_ids import complete_thinker_config, missing_token_ids, token_id_problems

ARCHITECTURE = "Qwen3OmniMoeForConditionalGeneration"
LORA_TARGET_MODULES = OmniThinkerAdapter.lora_target_modules
LORA_EXCLUDE_MODULES = r".*(visual|audio_tower|lm_head|talker|code2wav).*"


@TrainingAdapter.register(ARCHITECTURE, stage="thinker")
class Qwen3OmniThinkerAdapter(OmniThinkerAdapter):
    """Trains the thinker of ``Qwen3OmniMoeForConditionalGeneration``."""

    lora_exclude_modules = LORA_EXCLUDE_MODULES
    rollout_pipeline = PIPELINE
    policy_path = "omni_qwen3.thinker_policy.Qwen3OmniThinkerPolicy"
    processor_path = "omni_qwen3.processor.Qwen3OmniThinkerProcessor"

    def talker_drift_probe(self, model_path: str, model_config: Any) -> TalkerDriftProbe | None:
        """The checkpoint's talker as a frozen drift probe (:class:`omni_contracts.speech.SpeakingAdapter`)."""
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

    def thinker_config(self, model_config: Any) -> Any:
        """The thinker config with the media ids kept outside it filled in (see
        :mod:`omni_qwen3.token_ids`)."""
        return complete_thinker_config(model_config)


def _added_tokens(model_path: Path) -> dict[str, int]:
    """The tokenizer's added (special) tokens and their ids, from ``tokenizer.json``; empty
    when it cannot be read (the pre-flight reports that file on its own)."""
    try:
        added = json.loads((model_path / "tokenizer.json").read_text(encoding="utf-8")).get("added_tokens") or []
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return {}
    return {t["content"]: t["id"] for t in added if isinstance(t, dict) and isinstance(t.get("id"), int)}

