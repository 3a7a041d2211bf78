"""A small byte-level BPE tokenizer with Qwen3-Omni's special tokens, trained offline.

The real Qwen vocabulary has 151k entries; a tiny model with it spends almost all its
parameters and time on the embedding and the LM head and learns nothing in minutes. This
one has about 4k entries, trained in well under a second on a built-in corpus of numbers,
arithmetic and short sentences (:func:`omni_model_kit.tiny.qwen_tokenizer`). Its ids differ from
Qwen's: read ids from the tokenizer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from omni_model_kit.tiny import MediaTokens, qwen_tokenizer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# The special tokens of Qwen3-Omni's tokenizer, in its id order (151643 onward there).
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
    "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>",
    "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>",
)

MEDIA = MediaTokens(
    image="<|image_pad|>", video="<|video_pad|>", audio="<|audio_pad|>", vision_start="<|vision_start|>",
    vision_end="<|vision_end|>", audio_start="<|audio_start|>", audio_end="<|audio_end|>",
)
"""The media tokens the Qwen3-Omni processor reads from the tokenizer."""


def train_tokenizer(vocab_size: int = 4096, seed: int = 0) -> PreTrainedTokenizerBase:
    """Train the tokenizer and wrap it as a transformers ``Qwen2Tokenizer``."""
    return qwen_tokenizer(SPECIAL_TOKENS, MEDIA, vocab_size, seed)
