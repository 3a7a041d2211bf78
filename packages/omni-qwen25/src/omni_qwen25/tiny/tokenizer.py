"""A small byte-level BPE tokenizer with Qwen2.5-Omni's special tokens, trained offline.

About 4k entries instead of Qwen's 151k, trained on the shared built-in corpus
(:func:`omni_model_kit.tiny.qwen_tokenizer`). Its ids differ from Qwen's: read ids from the
tokenizer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from omni_model_kit.tiny import MediaTokens, qwen_tokenizer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# The added tokens of Qwen2.5-Omni's tokenizer, in its id order (151643 onward there:
# <|AUDIO|> 151646, <|audio_bos|> 151647, <|vision_bos|> 151652, <|IMAGE|> 151655, ...).
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>",
    "<|audio_eos|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_bos|>",
    "<|vision_eos|>", "<|vision_pad|>", "<|IMAGE|>", "<|VIDEO|>", "<tool_call>", "</tool_call>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
    "<|file_sep|>",
)

MEDIA = MediaTokens(
    image="<|IMAGE|>", video="<|VIDEO|>", audio="<|AUDIO|>", vision_start="<|vision_bos|>",
    vision_end="<|vision_eos|>", audio_start="<|audio_bos|>", audio_end="<|audio_eos|>",
)
"""The media tokens the Qwen2.5-Omni processor reads from the tokenizer."""


def train_tokenizer(vocab_size: int = 4096, seed: int = 0) -> PreTrainedTokenizerBase:
    """Train the tokenizer and wrap it as a transformers ``Qwen2Tokenizer``."""
    return qwen_tokenizer(SPECIAL_TOKENS, MEDIA, vocab_size, seed)
