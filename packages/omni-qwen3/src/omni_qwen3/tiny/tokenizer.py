"""A small byte-level BPE tokenizer with Qwen3-Omni's special tokens, trained offline.

The real Qwen vocabulary has 151k entries; a tiny model with it spends almost all its
parameters and time on the embedding and the LM head and learns nothing in minutes. This
one has about 4k entries, trained in well under a second on a built-in corpus of numbers,
arithmetic and short sentences. Its ids differ from Qwen's: read ids from the tokenizer.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

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

_WORDS: list[str] = (
    "the a an and or not is are was be to of in on at for with by from as it this that what "
    "which who how many much more less total each every all some none answer question number "
    "sum difference product half twice three four five six seven eight nine ten hundred apples "
    "books coins cats dogs birds cars hours minutes days weeks dollars cents meters liters "
    "red blue green yellow black white big small left right up down yes no true false image "
    "audio video sound picture tone shows hear see listen look describe think step first then "
    "finally therefore so because if else buys sells has have gives takes eats reads runs "
    "walks school store farm park city teacher student friend mother father sister brother"
).split()


def _pseudo_words(rng: random.Random, count: int) -> list[str]:
    """Pronounceable made-up words, so that BPE has enough distinct pieces to merge."""
    onsets = "b c d f g h j k l m n p r s t v w z br cl dr fl gr pl st th sh ch".split()
    vowels = "a e i o u ai ea oo ou".split()
    codas = ["", "", "n", "r", "s", "t", "l", "m", "ng", "ck"]
    words: set[str] = set()
    while len(words) < count:
        syllables = rng.choice((1, 2, 2, 3))
        words.add("".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(syllables)))
    return sorted(words)


def training_corpus(seed: int = 0, lines: int = 8000) -> Iterator[str]:
    """Deterministic text: arithmetic, short word problems, chat turns, and made-up words
    drawn with Zipf-like frequencies (frequent ones become single tokens)."""
    rng = random.Random(seed)
    lexicon = _WORDS + _pseudo_words(rng, 6000)
    weights = [1.0 / (rank + 1) for rank in range(len(lexicon))]
    for _ in range(lines):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        op = rng.choice("+-*/")
        words = " ".join(rng.choices(lexicon, weights, k=rng.randint(4, 14)))
        yield f"{words.capitalize()}? {a} {op} {b} = {rng.randint(0, 9999)}."
        yield f"The answer is \\boxed{{{a}}}. <answer>{b}</answer> #### {a + b}"
        yield f"system\nYou are a helpful assistant.\nuser\n{words}\nassistant\n{a}"


def train_tokenizer(vocab_size: int = 4096, seed: int = 0) -> PreTrainedTokenizerBase:
    """Train the tokenizer and wrap it as a transformers ``Qwen2Tokenizer``."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

    bpe = Tokenizer(models.BPE())
    # The same normalizer and pre-tokenizer as Qwen2Tokenizer, so the merges carry over.
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(training_corpus(seed), trainer)
    model = json.loads(bpe.to_str())["model"]
    # The BPE model takes merges as (left, right) pairs; the annotation says strings.
    options: dict[str, Any] = {
        "vocab": model["vocab"],
        "merges": [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]],
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,  # byte-level: every input has tokens
        "extra_special_tokens": NAMED_TOKENS,
    }
    tokenizer = Qwen2Tokenizer(**options)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tokenizer
