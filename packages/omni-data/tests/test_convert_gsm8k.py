from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from omni_data.convert import gsm8k
from omni_data.convert.cli import main
from omni_data.errors import InputFormatError


def write_inputs(root: Path) -> None:
    train = [
        {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=7\n#### 7"},
        {"question": "A farm sells 1,250 eggs twice.", "answer": "1250*2=2500\n#### 2,500"},
        {"question": "Owes money?", "answer": "It is negative.\n#### -12"},
        {"question": "No marker here", "answer": "The answer is 5"},  # no_final_answer
        {"question": "   ", "answer": "#### 1"},  # empty_question
    ]
    (root / "main").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(train), root / "main" / "train-00000-of-00001.parquet")
    test = [{"question": "What is 2+2?", "answer": "#### 4"}, {"question": "Half of 5?", "answer": "#### 2.5"}]
    (root / "test.jsonl").write_text("\n".join(json.dumps(r) for r in test) + "\n")


def test_converts_parquet_and_jsonl_with_exact_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_inputs(tmp_path / "raw")
    status = main(["gsm8k", "--input", str(tmp_path / "raw"), "--output-dir", str(tmp_path / "out")])
    assert status == 0
    printed = capsys.readouterr().out
    assert "train: read 5, kept 3, dropped 2 (empty_question=1, no_final_answer=1)" in printed
    assert "test: read 2, kept 2, dropped 0 (none)" in printed

    train = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert [r["reward_model"] for r in train] == [
        {"style": "rule", "ground_truth": "7"},
        {"style": "rule", "ground_truth": "2500"},  # thousands separator removed
        {"style": "rule", "ground_truth": "-12"},
    ]
    first = train[0]
    assert set(first) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert first["data_source"] == "openai/gsm8k" and first["ability"] == "math"
    assert first["prompt"] == [
        {"role": "user", "content": f"Tom has 3 apples and buys 4. How many? {gsm8k.INSTRUCTION}"}
    ]
    assert "####" in gsm8k.INSTRUCTION
    assert first["extra_info"] == {
        "split": "train",
        "index": 0,
        "question": "Tom has 3 apples and buys 4. How many?",
        "answer": "3+4=7\n#### 7",
    }
    test = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
    assert [r["reward_model"]["ground_truth"] for r in test] == ["4", "2.5"]


def test_missing_column_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "train.jsonl").write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(InputFormatError, match=r"train.jsonl:1 lacks field\(s\) \['answer'\]"):
        gsm8k.convert(tmp_path / "raw", tmp_path / "out")


def test_empty_input_directory_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "raw").mkdir()
    assert main(["gsm8k", "--input", str(tmp_path / "raw"), "--output-dir", str(tmp_path / "o")]) == 2
    assert "No .parquet/.jsonl files under" in capsys.readouterr().err


def test_runs_as_a_module(tmp_path: Path) -> None:
    import subprocess
    import sys

    write_inputs(tmp_path / "raw")
    done = subprocess.run(
        [sys.executable, "-m", "omni_data.convert", "gsm8k", "--input", str(tmp_path / "raw"),
         "--output-dir", str(tmp_path / "out")],
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("[gsm8k]\n  test: read 2, kept 2")
    assert (tmp_path / "out" / "train.parquet").is_file()
