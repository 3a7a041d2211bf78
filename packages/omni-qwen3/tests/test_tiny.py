from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from omni_qwen3.tiny import TinySpec, build_tiny_qwen3_omni
from omni_qwen3.tiny.__main__ import main as tiny_cli


def test_checkpoint_is_complete(tiny_path: Path) -> None:
    names = {p.name for p in tiny_path.iterdir()}
    assert {
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
        "processor_config.json", "chat_template.json",
    } <= names
    assert "chat_template" not in json.loads((tiny_path / "tokenizer_config.json").read_text())


def test_config_is_real_and_token_ids_come_from_the_tokenizer(tiny_path: Path, tiny_config: Any) -> None:
    from transformers import AutoTokenizer, Qwen3OmniMoeConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    assert isinstance(tiny_config, Qwen3OmniMoeConfig)
    assert tiny_config.architectures == ["Qwen3OmniMoeForConditionalGeneration"]
    thinker = tiny_config.thinker_config
    assert 3500 <= len(tokenizer) <= 4200
    assert thinker.text_config.vocab_size == len(tokenizer)
    ids = tokenizer.convert_tokens_to_ids
    assert thinker.image_token_id == ids("<|image_pad|>")
    assert thinker.video_token_id == ids("<|video_pad|>")
    assert thinker.audio_token_id == ids("<|audio_pad|>")
    assert thinker.audio_start_token_id == ids("<|audio_start|>")
    assert thinker.vision_start_token_id == ids("<|vision_start|>")
    assert tiny_config.im_end_token_id == tokenizer.eos_token_id == ids("<|im_end|>")
    assert tiny_config.assistant_token_id == tokenizer.encode("assistant")[0]


def test_tokenizer_keeps_special_tokens_whole(tiny_path: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    text = "<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>12 apples<|im_end|>"
    ids = tokenizer.encode(text)
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert tokenizer.decode(ids) == text
    assert tokenizer.image_token == "<|image_pad|>" and tokenizer.audio_bos_token == "<|audio_start|>"


def test_weights_are_seeded_and_initialised(tmp_path: Path, tiny_path: Path) -> None:
    weights = load_file(tiny_path / "model.safetensors")
    assert any(name.startswith("talker.") and "experts" in name for name in weights)
    for name, tensor in weights.items():
        assert torch.isfinite(tensor).all() and tensor.abs().max() < 10, name
    same = load_file(build_tiny_qwen3_omni(tmp_path / "again", seed=0) / "model.safetensors")
    other = load_file(build_tiny_qwen3_omni(tmp_path / "other", seed=1) / "model.safetensors")
    assert all(torch.equal(weights[name], same[name]) for name in weights)
    assert not torch.equal(weights["thinker.lm_head.weight"], other["thinker.lm_head.weight"])


def test_a_repeated_build_reuses_the_directory(tiny_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = tiny_path / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert build_tiny_qwen3_omni(tiny_path, seed=0) == tiny_path
    assert tiny_cli(["--out", str(tiny_path)]) == 0
    assert capsys.readouterr().out.startswith(str(tiny_path))
    assert weights.stat().st_mtime_ns == stamp


def test_default_location_is_the_cache_keyed_by_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMNI_RL_CACHE", str(tmp_path))
    small = TinySpec(vocab_size=1024, text_layers=1, text_hidden_size=32)
    path = build_tiny_qwen3_omni(spec=small)
    assert path.parent == tmp_path / "tiny-qwen3-omni"
    assert build_tiny_qwen3_omni(spec=small) == path
    assert build_tiny_qwen3_omni(spec=small, seed=3) != path


def test_a_directory_with_other_contents_is_refused(tmp_path: Path, tiny_path: Path) -> None:
    with pytest.raises(FileExistsError, match=r"built from other settings .* delete it or pass another out_dir"):
        build_tiny_qwen3_omni(tiny_path, seed=5)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"is not a tiny checkpoint; choose an empty directory"):
        build_tiny_qwen3_omni(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"
