"""The files of a Hugging Face checkpoint folder that belong to its tokenizer and processor.

A merged or exported checkpoint is loadable only with all of them, and ``save_pretrained`` on
the model writes none. Which files a tokenizer reads depends on its class (``vocab.txt`` for
BERT, ``tokenizer.model`` for sentencepiece, ``spiece.model`` for T5, ``*.tiktoken`` for
tiktoken-based ones), so the rule is the union of what transformers' classes declare, plus the
file patterns transformers looks for beside them. ``tests/test_side_files.py`` checks the union
against the installed transformers, so an upgrade that adds a name fails a test.
"""

from __future__ import annotations

import json
from pathlib import Path

#: Every value of ``vocab_files_names`` over transformers' tokenizer classes
#: (``TOKENIZER_MAPPING_NAMES``, transformers 5.10).
TOKENIZER_VOCAB_FILES = frozenset({
    "bpe.codes", "byte_maps.json", "dict.txt", "emoji.json", "entity_vocab.json", "merges.txt",
    "normalizer.json", "prophetnet.tokenizer", "sentencepiece.bpe.model", "sentencepiece.model",
    "source.spm", "spiece.model", "spm.model", "spm_char.model", "target.spm", "target_vocab.json",
    "tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab-src.json", "vocab-tgt.json",
    "vocab.json", "vocab.txt", "word_pronunciation.json", "word_shape.json",
})

#: The names transformers gives the other files of a tokenizer, a processor (and its image,
#: video, audio parts) and the generation defaults (``transformers.utils`` constants).
FIXED_SIDE_FILES = frozenset({
    "added_tokens.json", "special_tokens_map.json", "chat_template.jinja", "chat_template.json",
    "processor_config.json", "preprocessor_config.json", "video_preprocessor_config.json",
    "audio_tokenizer_config.json", "generation_config.json",
    # mistral-style vocabularies, which transformers converts when no tokenizer.json is present
    "tekken.json", "tiktoken.model",
})

#: Glob patterns for files whose names vary: tiktoken vocabularies (``qwen.tiktoken``),
#: versioned sentencepiece models (``tokenizer.model.v3``) and named chat templates.
SIDE_FILE_PATTERNS = ("*.tiktoken", "tokenizer.model.*", "additional_chat_templates/*.jinja")


def side_files(folder: str | Path) -> list[Path]:
    """The tokenizer, processor and generation files under ``folder``, relative to it, sorted.

    Covers the folder itself and each immediate subfolder that holds a ``tokenizer_config.json``
    (a processor with several tokenizers saves the extra ones there, e.g. ``decoder_tokenizer/``).
    Versioned ``tokenizer.json`` variants named in ``tokenizer_config.json``'s
    ``fast_tokenizer_files`` are included.
    """
    root = Path(folder)
    found: set[Path] = set()
    extra_tokenizers = (d for d in root.iterdir() if d.is_dir() and (d / "tokenizer_config.json").is_file())
    tokenizer_dirs = [root, *sorted(extra_tokenizers)]
    for directory in tokenizer_dirs:
        names = TOKENIZER_VOCAB_FILES | FIXED_SIDE_FILES | set(_fast_tokenizer_files(directory))
        found.update(directory / name for name in names if (directory / name).is_file())
        found.update(p for pattern in SIDE_FILE_PATTERNS for p in directory.glob(pattern) if p.is_file())
    return sorted(p.relative_to(root) for p in found)


def _fast_tokenizer_files(directory: Path) -> list[str]:
    config = directory / "tokenizer_config.json"
    if not config.is_file():
        return []
    try:
        names = json.loads(config.read_text(encoding="utf-8")).get("fast_tokenizer_files", [])
    except (ValueError, AttributeError) as exc:  # not JSON, not UTF-8, or not an object
        raise ValueError(f"{config} is not a JSON object ({exc}); repair or remove it.") from exc
    return [n for n in names if isinstance(n, str) and "/" not in n and n != ".."]
