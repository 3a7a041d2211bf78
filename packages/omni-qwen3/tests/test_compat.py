"""Canary for ``omni_qwen3.compat``: transformers' private audio-length function still
exists and gives the audio placeholders the processor writes, for audio of several lengths
(one to several of the encoder's 100-frame chunks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from omni_qwen3.compat import audio_output_lengths


@pytest.mark.parametrize("seconds", [0.3, 1.0, 2.37])
def test_audio_output_lengths_are_the_processors_audio_placeholders(
    tiny_path: Path, tiny_config: Any, media: Any, seconds: float
) -> None:
    from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter

    processor = Qwen3OmniThinkerAdapter().configure_processor(str(tiny_path), tiny_config)
    messages = [{"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": "What is it?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    encoded = processor(text=[text], audio=[media.tone(seconds)], return_tensors="pt")
    mel_frames = encoded["feature_attention_mask"].sum(-1)
    placeholders = int((encoded["input_ids"] == tiny_config.thinker_config.audio_token_id).sum())
    assert audio_output_lengths(mel_frames).tolist() == [placeholders]
    assert audio_output_lengths(torch.tensor([100, 3000])).tolist() == [13, 390]  # 13 per full chunk
