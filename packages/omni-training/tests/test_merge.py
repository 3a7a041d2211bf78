"""``merge_lora`` writes a checkpoint that loads with everything its base needed beside the weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from omni_training.merge import merge_lora

#: Side files of the kinds the old fixed list missed (sentencepiece, tiktoken, named templates,
#: a processor's extra tokenizer) beside the usual ones; contents are arbitrary bytes, since the
#: merge copies them without parsing.
SIDE = {
    "tokenizer.model": b"\x0a\x05sentencepiece\xff",
    "qwen.tiktoken": b"IQ== 0\nIg== 1\n",
    "tokenizer_config.json": json.dumps({"tokenizer_class": "Qwen2Tokenizer"}).encode(),
    "chat_template.jinja": b"{% for m in messages %}{{ m.content }}{% endfor %}",
    "chat_template.json": json.dumps({"chat_template": "{{ messages }}"}).encode(),
    "additional_chat_templates/tool_use.jinja": b"{{ tools }}",
    "preprocessor_config.json": json.dumps({"feature_size": 128}).encode(),
    "generation_config.json": json.dumps({"do_sample": True, "top_k": 7, "eos_token_id": 1}).encode(),
    "decoder_tokenizer/tokenizer_config.json": b"{}",
    "decoder_tokenizer/spiece.model": b"\x00spiece",
}


def test_merge_copies_every_tokenizer_and_processor_file_byte_for_byte(tmp_path: Path, tiny_lm_path: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = tmp_path / "base"
    shutil.copytree(tiny_lm_path, base)
    for name, content in SIDE.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_bytes(content)
    (base / "README.md").write_text("not a tokenizer file")
    adapter = tmp_path / "adapter"
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=2, target_modules=["q_proj"]))
    lora.save_pretrained(adapter)

    out = merge_lora(base, adapter, tmp_path / "merged", auto_class="AutoModelForCausalLM")

    copied = {name: (out / name).read_bytes() if (out / name).is_file() else None for name in SIDE}
    assert copied == SIDE  # generation_config.json too: the base's, not the re-serialized one
    assert not (out / "README.md").exists()
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()


def test_merge_refuses_a_broken_tokenizer_config_before_writing(tmp_path: Path) -> None:
    base, adapter = tmp_path / "base", tmp_path / "adapter"
    for folder, name in ((base, "config.json"), (adapter, "adapter_config.json")):
        folder.mkdir()
        (folder / name).write_text("{}")
    (base / "tokenizer_config.json").write_text("not json")
    with pytest.raises(ValueError, match=r"tokenizer_config.json is not a JSON object"):
        merge_lora(base, adapter, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_an_adapter_merged_onto_another_base_names_the_base_it_was_trained_on(
    tmp_path: Path, tiny_lm_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It exited 2 with PEFT's "Error(s) in loading state_dict" alone."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from omni_training.merge import main

    adapter = tmp_path / "adapter"
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_lm_path), LoraConfig(r=2, target_modules=["q_proj"]))
    lora.save_pretrained(adapter)
    wider = tmp_path / "wider"
    Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2)).save_pretrained(wider)
    code = main(["--base", str(wider), "--adapter", str(adapter), "--out", str(tmp_path / "merged"),
                 "--auto-class", "AutoModelForCausalLM"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{adapter} does not fit {wider}: it was trained on {tiny_lm_path}" in err
    assert "merge it into that base" in err
    assert not (tmp_path / "merged").exists()
