"""Model directories for the pre-flight tests: complete enough to pass its folder checks
(a tokenizer with a vocabulary, a chat template, whole weights, the thinker's token ids),
with nothing that loads. Tests break one piece at a time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

QWEN3 = "Qwen3OmniMoeForConditionalGeneration"
THINKER_IDS = {"image_token_id": 5, "video_token_id": 6, "audio_token_id": 7, "vision_start_token_id": 8,
               "audio_start_token_id": 9}
"""Ids of the tokens :func:`write_tokenizer` adds (the Qwen3-Omni pre-flight checks they are set)."""
ADDED = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_end|>", "<|vision_end|>", "<|image_pad|>",
         "<|video_pad|>", "<|audio_pad|>", "<|vision_start|>", "<|audio_start|>")


def minimal_checkpoint(directory: Path, architecture: str = QWEN3) -> Path:
    """``directory`` holding config.json, tokenizer.json, chat_template.jinja and a one-tensor
    model.safetensors (returned)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({"architectures": [architecture], "thinker_config": THINKER_IDS}))
    write_tokenizer(directory)
    (directory / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    save_file({"w": np.arange(4, dtype=np.float32)}, str(directory / "model.safetensors"))
    return directory


def write_tokenizer(directory: Path, vocab: dict[str, int] | None = None) -> None:
    """A tokenizers-format ``tokenizer.json``: a word-level vocabulary (``vocab``, default two
    words) and the Qwen special tokens of :data:`ADDED` after it."""
    words = {"hello": 0, "world": 1} if vocab is None else vocab
    added = [{"id": len(words) + i, "content": token, "special": True} for i, token in enumerate(ADDED)]
    (directory / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "added_tokens": added, "pre_tokenizer": {"type": "Whitespace"},
        "model": {"type": "WordLevel", "vocab": words, "unk_token": "<|endoftext|>"},
    }))
