"""The auto class that loads a checkpoint: the adapter's, the multimodal default, or the
causal-LM fallback for a text-only model; otherwise an error naming ``auto_model_class``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from omni_contracts import TrainingAdapter
from omni_training.model_loading import _from_pretrained


class PlainAdapter(TrainingAdapter):
    def get_strip_modules(self, model_config: Any) -> Sequence[str]:
        return ()

    def configure_processor(self, model_path: str, model_config: Any) -> Any:
        return None

    def configure_tokenizer(self, model_path: str, model_config: Any) -> Any:
        return None


def test_text_only_causal_lm_falls_back_to_the_causal_lm_auto_class(tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, intermediate_size=32)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    # AutoModelForMultimodalLM does not own LlamaConfig; before the fallback this raised
    # transformers' "Unrecognized configuration class" listing dozens of config classes.
    assert type(_from_pretrained(str(tmp_path), PlainAdapter(), config, "float32")).__name__ == "LlamaForCausalLM"


def test_an_architecture_no_auto_class_owns_names_the_adapter_attribute(tmp_path: Path) -> None:
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                       image_size=8, patch_size=4)
    ViTModel(config).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"Set `auto_model_class` on PlainAdapter"):
        _from_pretrained(str(tmp_path), PlainAdapter(), config, "float32")
