"""A small byte-level BPE tokenizer with Qwen2.5-Omni's special tokens, trained offline.

About 4k entries instead of Qwen's 151k, trained on the shared built-in corpus
(:func:`omni_contracts.tiny.train_bpe`). Its ids differ from Qwen's: read ids from the
tokenizer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_contracts.tiny import train_bpe

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

# Named multimodal tokens the Qwen2.5-Omni processor reads from the tokenizer.
NAMED_TOKENS: dict[str, str] = {
    "image_token": "<|IMAGE|>",
    "video_token": "<|VIDEO|>",
    "audio_token": "<|AUDIO|>",
    "vision_bos_token": "<|vision_bos|>",
    "vision_eos_token": "<|vision_eos|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
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
