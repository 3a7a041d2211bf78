"""A small byte-level BPE tokenizer with Qwen3-Omni's special tokens, trained offline.

The real Qwen vocabulary has 151k entries; a tiny model with it spends almost all its
parameters and time on the embedding and the LM head and learns nothing in minutes. This
one has about 4k entries, trained in well under a second on a built-in corpus of numbers,
arithmetic and short sentences (:func:`omni_contracts.tiny.train_bpe`). Its ids differ from
Qwen's: read ids from the tokenizer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_contracts.tiny import train_bpe

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

# Named multimodal tokens the Qwen3-Omni processor reads from the tokenizer.
NAMED_TOKENS: dict[str, str] = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "audio_token": "<|audio_pad|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
}


def train_tokenizer(vocab_size: int = 4096, seed: int = 0) -> PreTrainedTokenizerBase:
    """Train the tokenizer and wrap it as a transformers ``Qwen2Tokenizer``."""
    from tokenizers import AddedToken
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

    vocab, merges = train_bpe(vocab_size, SPECIAL_TOKENS, PRETOKENIZE_REGEX, seed=seed)
    options: dict[str, Any] = {
        "vocab": vocab,
        "merges": merges,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,  # byte-level: every input has tokens
        "extra_special_tokens": NAMED_TOKENS,
    }
    tokenizer = Qwen2Tokenizer(**options)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tokenizer
