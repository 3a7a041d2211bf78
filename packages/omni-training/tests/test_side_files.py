"""Which files of a checkpoint folder are its tokenizer's and processor's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omni_training.side_files import FIXED_SIDE_FILES, TOKENIZER_VOCAB_FILES, side_files


def test_the_names_cover_every_transformers_tokenizer_class_and_file_constant() -> None:
    """A transformers upgrade that adds a tokenizer file name fails here, naming it."""
    from transformers import tokenization_utils_base as tub
    from transformers import utils
    from transformers.models.auto import tokenization_auto

    declared: dict[str, str] = {}
    for class_name in tokenization_auto.TOKENIZER_MAPPING_NAMES.values():
        if class_name is None:
            continue
        cls = tokenization_auto.tokenizer_class_from_name(class_name)
        assert cls is not None, f"transformers names {class_name} but cannot import it"
        # RagTokenizer wraps two tokenizers and declares no files of its own
        declared.update({name: class_name for name in getattr(cls, "vocab_files_names", {}).values()})
    constants = {
        tub.ADDED_TOKENS_FILE, tub.SPECIAL_TOKENS_MAP_FILE, tub.TOKENIZER_CONFIG_FILE, tub.FULL_TOKENIZER_FILE,
        utils.CHAT_TEMPLATE_FILE, utils.LEGACY_PROCESSOR_CHAT_TEMPLATE_FILE, utils.PROCESSOR_NAME,
        utils.FEATURE_EXTRACTOR_NAME, utils.IMAGE_PROCESSOR_NAME, utils.VIDEO_PROCESSOR_NAME,
        utils.AUDIO_TOKENIZER_NAME, utils.GENERATION_CONFIG_NAME,
    }
    assert "tokenizer.model" in declared and "vocab.txt" in declared  # the enumeration reached the classes
    missing = {name: declared[name] for name in set(declared) - TOKENIZER_VOCAB_FILES}
    assert not missing, f"add these names (declared by the named classes) to TOKENIZER_VOCAB_FILES: {missing}"
    unlisted = constants - TOKENIZER_VOCAB_FILES - FIXED_SIDE_FILES
    assert not unlisted, f"add these transformers file names to FIXED_SIDE_FILES: {sorted(unlisted)}"


def test_side_files_finds_vocabularies_templates_and_extra_tokenizers(tmp_path: Path) -> None:
    for name in ("config.json", "model.safetensors", "model.safetensors.index.json", "README.md", "modeling_x.py",
                 "tokenizer.model", "tokenizer.model.v3", "qwen.tiktoken", "vocab.txt", "tokenizer.4.0.json",
                 "preprocessor_config.json", "chat_template.jinja", "additional_chat_templates/tool_use.jinja",
                 "decoder_tokenizer/spiece.model", "decoder_tokenizer/tokenizer_config.json",
                 "other/tokenizer.model"):  # no tokenizer_config.json beside it: not a tokenizer folder
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"fast_tokenizer_files": ["tokenizer.4.0.json"]}))
    (tmp_path / "decoder_tokenizer" / "tokenizer_config.json").write_text("{}")
    assert side_files(tmp_path) == sorted(Path(p) for p in (
        "additional_chat_templates/tool_use.jinja", "chat_template.jinja", "decoder_tokenizer/spiece.model",
        "decoder_tokenizer/tokenizer_config.json", "preprocessor_config.json", "qwen.tiktoken", "tokenizer.4.0.json",
        "tokenizer.model", "tokenizer.model.v3", "tokenizer_config.json", "vocab.txt",
    ))


def test_a_tokenizer_config_that_is_not_an_object_is_named(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text("[1]")
    with pytest.raises(ValueError, match=r"tokenizer_config.json is not a JSON object .*repair or remove it"):
        side_files(tmp_path)
