"""``trainer convert | merge | model``: a bad path or argument is one ``error:`` line and exit 2,
never a traceback (before, most of these raised one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omni_trainer.cli import main


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """A file, an adapter directory, a checkpoint with a corrupt shard, raw GSM8K and MMK12 inputs."""
    (tmp_path / "file.txt").write_text("not a directory")
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text(json.dumps({"model_type": "qwen3_omni_moe"}))
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "config.json").write_text("{}")
    (tmp_path / "corrupt" / "model.safetensors").write_bytes(b"\x08" + b"\x00" * 7 + b"garbage!")
    (tmp_path / "gsm8k").mkdir()
    for split in ("train", "test"):
        (tmp_path / "gsm8k" / f"{split}.jsonl").write_text(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n")
    (tmp_path / "mmk12").mkdir()
    (tmp_path / "mmk12" / "train.parquet").write_text("not parquet")
    return tmp_path


CASES = [
    ("convert gsm8k --input {t}/missing --output-dir {t}/out", "does not exist"),
    ("convert gsm8k --input {t}/file.txt --output-dir {t}/out", "not a directory"),
    ("convert gsm8k --input {t}/gsm8k --output-dir {t}/file.txt", "file.txt is a file, not a directory"),
    ("convert gsm8k --input {t}/gsm8k --output-dir {t}/file.txt/rl", "file.txt is a file, not a directory"),
    ("convert mmk12 --input {t}/mmk12 --output-dir {t}/out", "train.parquet"),
    ("merge --base {t}/base --adapter {t}/missing --out {t}/merged", "has no adapter_config.json"),
    ("merge --base {t}/missing --adapter {t}/adapter --out {t}/merged", "missing has no config.json"),
    ("merge --base {t}/adapter --adapter {t}/adapter --out {t}/merged", "adapter has no config.json"),
    ("merge --base {t}/base --adapter {t}/adapter --out {t}/merged --auto-class Nope", "not a transformers auto class"),
    ("merge --base {t}/base --adapter {t}/adapter --out {t}/file.txt", "file.txt exists"),
    ("model noise --src {t}/missing --out {t}/noised", "missing has no config.json"),
    ("model noise --src {t}/corrupt --out {t}/noised --fraction 2", "fraction must be in (0, 1]"),
    ("model noise --src {t}/corrupt --out {t}/noised --include [", "is not a regular expression"),
    ("model noise --src {t}/corrupt --out {t}/file.txt", "file.txt exists"),
    ("model noise --src {t}/corrupt --out {t}/noised", "header"),  # safetensors cannot read the shard
    ("model", "name a tool"),
    ("model bogus", "unknown tool 'bogus'"),
]


@pytest.mark.parametrize(("command", "expected"), CASES)
def test_a_bad_path_or_argument_is_one_error_line(
    files: Path, command: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(command.format(t=files).split()) == 2  # in-process: a traceback would fail the test
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("error: ") and expected in lines[-1], lines
    assert not (files / "noised").exists() and not (files / "merged").exists()  # nothing half written


@pytest.mark.parametrize("command", ["convert gsm8k --input {t}/gsm8k", "model noise --src {t}/corrupt", "merge"])
def test_missing_arguments_are_argparse_usage_errors(files: Path, command: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(command.format(t=files).split())
    assert info.value.code == 2
