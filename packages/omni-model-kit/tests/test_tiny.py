"""The shared pieces of the model packages' tiny checkpoints (omni_model_kit.tiny, chat_template)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omni_model_kit.chat_template import chatml_template, load_chat_template
from omni_model_kit.tiny import MARKER, cached_build, train_bpe

REGEX = r"\s+|\w+|[^\w\s]+"


def test_chatml_template_places_each_medium_and_refuses_unknown_parts() -> None:
    jinja2 = pytest.importorskip("jinja2")
    template = jinja2.Environment().from_string(chatml_template(image="<I>", audio="<A>", video="<V>"))
    parts = [{"type": "image"}, {"type": "audio_url"}, {"type": "video"}, {"type": "text", "text": "hi"}]
    text = template.render(messages=[{"role": "user", "content": parts}], add_generation_prompt=True)
    assert text == "<|im_start|>user\n<I><A><V>hi<|im_end|>\n<|im_start|>assistant\n"


def test_train_bpe_puts_special_tokens_first_and_is_deterministic() -> None:
    specials = ("<|a|>", "<|b|>")
    vocab, merges = train_bpe(300, specials, REGEX)
    assert (vocab["<|a|>"], vocab["<|b|>"]) == (0, 1)
    assert len(vocab) == 300 and merges and all(len(pair) == 2 for pair in merges)
    assert train_bpe(300, specials, REGEX) == (vocab, merges)


def test_cached_build_writes_once_and_refuses_foreign_directories(tmp_path: Path) -> None:
    calls: list[Path] = []

    def write(staging: Path) -> None:
        calls.append(staging)
        (staging / "weights").write_text("w")

    target = tmp_path / "ckpt"
    assert cached_build("tiny-x", {"seed": 0}, write, target) == target
    assert cached_build("tiny-x", {"seed": 0}, write, target) == target
    assert len(calls) == 1 and json.loads((target / MARKER).read_text())["seed"] == 0
    with pytest.raises(FileExistsError, match="built from other settings"):
        cached_build("tiny-x", {"seed": 1}, write, target)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="is not a tiny checkpoint"):
        cached_build("tiny-x", {"seed": 0}, write, tmp_path / "mine")


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path) -> None:
    def fail(staging: Path) -> None:
        (staging / "half").write_text("x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        cached_build("tiny-x", {"seed": 0}, fail, tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


def test_load_chat_template_prefers_json_then_jinja_and_names_both(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="chat_template.json nor chat_template.jinja"):
        load_chat_template(tmp_path)
    (tmp_path / "chat_template.jinja").write_text("J")
    assert load_chat_template(tmp_path) == "J"
    (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": "T"}))
    assert load_chat_template(str(tmp_path)) == "T"
