from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from omni_qwen25.tiny import TinySpec, build_tiny_qwen25_omni
from omni_qwen25.tiny.__main__ import main as tiny_cli


def test_checkpoint_is_complete(tiny_path: Path) -> None:
    names = {p.name for p in tiny_path.iterdir()}
    assert {
        "config.json", "model.safetensors", "spk_dict.pt", "tokenizer.json", "tokenizer_config.json",
        "processor_config.json", "chat_template.json",
    } <= names
    assert "chat_template" not in json.loads((tiny_path / "tokenizer_config.json").read_text())


def test_config_is_real_and_every_token_id_comes_from_the_tokenizer(tiny_path: Path, tiny_config: Any) -> None:
    from transformers import AutoTokenizer, Qwen2_5OmniConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    assert isinstance(tiny_config, Qwen2_5OmniConfig)
    assert tiny_config.architectures == ["Qwen2_5OmniForConditionalGeneration"]
    ids = tokenizer.convert_tokens_to_ids
    thinker, talker = tiny_config.thinker_config, tiny_config.talker_config
    assert 3500 <= len(tokenizer) <= 4200
    # Three rows past the tokenizer for the talker's tts text ids, as in the real model.
    assert thinker.text_config.vocab_size == len(tokenizer) + 3
    assert sorted((talker.tts_text_pad_token_id, talker.tts_text_start_token_id, talker.tts_text_end_token_id)) == [
        len(tokenizer), len(tokenizer) + 1, len(tokenizer) + 2,
    ]
    for config in (thinker, talker):
        assert config.image_token_id == ids("<|IMAGE|>")
        assert config.video_token_id == ids("<|VIDEO|>")
        assert config.audio_token_id == ids("<|AUDIO|>")
        assert config.audio_start_token_id == ids("<|audio_bos|>")
        assert config.audio_end_token_id == ids("<|audio_eos|>")
        assert config.vision_start_token_id == ids("<|vision_bos|>")
        assert config.vision_end_token_id == ids("<|vision_eos|>")
    assert thinker.user_token_id == tokenizer.encode("user")[0]
    assert thinker.text_config.eos_token_id == tokenizer.eos_token_id == ids("<|im_end|>")
    assert tokenizer.image_token == "<|IMAGE|>" and tokenizer.audio_bos_token == "<|audio_bos|>"


def test_weights_are_seeded(tmp_path: Path, tiny_path: Path) -> None:
    weights = load_file(tiny_path / "model.safetensors")
    assert any(name.startswith("token2wav.") for name in weights)
    for name, tensor in weights.items():
        assert torch.isfinite(tensor).all() and tensor.abs().max() < 10, name
    other = load_file(build_tiny_qwen25_omni(tmp_path / "other", seed=1) / "model.safetensors")
    assert not torch.equal(weights["thinker.lm_head.weight"], other["thinker.lm_head.weight"])


def test_a_repeated_build_reuses_the_directory(tiny_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = tiny_path / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert build_tiny_qwen25_omni(tiny_path, seed=0) == tiny_path
    assert tiny_cli(["--out", str(tiny_path)]) == 0
    assert capsys.readouterr().out.startswith(str(tiny_path))
    assert weights.stat().st_mtime_ns == stamp
    with pytest.raises(FileExistsError, match=r"built from other settings .* delete it or pass another out_dir"):
        build_tiny_qwen25_omni(tiny_path, seed=5)


def test_default_location_is_the_cache_keyed_by_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNI_RL_CACHE", str(tmp_path))
    small = TinySpec(vocab_size=1024, text_layers=1, text_hidden_size=32)
    path = build_tiny_qwen25_omni(spec=small)
    assert path.parent == tmp_path / "tiny-qwen2.5-omni"
    assert build_tiny_qwen25_omni(spec=small) == path
