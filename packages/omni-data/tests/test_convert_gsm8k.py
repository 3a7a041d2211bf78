from __future__ import annotations

import json
import os
from collections import Counter
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


def test_rows_are_verls_field_for_field() -> None:
    """verl's examples/data_preprocess/gsm8k.py (which verl-omni's gsm8k recipe uses): the
    question as given (not stripped) + " " + its instruction; the number after the first
    "#### " (commas removed); extra_info split, index, answer, question."""
    record = {"question": "  Tom has 3 apples.\n", "answer": "3+4=7 #### 7\n#### 8"}
    row, reason = gsm8k.convert_record(record, "test", 4)
    assert reason == "" and row == {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": "  Tom has 3 apples.\n Let's think step by step and output the "
                    'final answer after "####".'}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "7"},
        "extra_info": {"split": "test", "index": 4, "answer": "3+4=7 #### 7\n#### 8",
                       "question": "  Tom has 3 apples.\n"},
    }
    assert list(row["extra_info"]) == ["split", "index", "answer", "question"]


@pytest.mark.parametrize(
    ("answer", "truth"),
    [("#### 1,250", "1250"), ("#### -3.5", "-3.5"), ("#### 5 dollars", "5"), ("####5", None), ("5", None)],
)
def test_final_answer_as_verl_extracts_it(answer: str, truth: str | None) -> None:
    # verl asserts (and stops) where there is none; here the row is dropped and counted.
    assert gsm8k.final_answer(answer) == truth


def test_missing_column_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "train.jsonl").write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(InputFormatError, match=r"train.jsonl:1 lacks field\(s\) \['answer'\]"):
        gsm8k.convert(tmp_path / "raw", tmp_path / "out")


def test_empty_input_directory_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "raw").mkdir()
    assert main(["gsm8k", "--input", str(tmp_path / "raw"), "--output-dir", str(tmp_path / "o")]) == 2
    assert "No GSM8K main split files under" in capsys.readouterr().err


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


def jsonl(path: Path, records: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def problems(prefix: str, count: int, socratic: bool = False) -> list[dict[str, str]]:
    """GSM8K-shaped records; the socratic answers carry sub-questions, as the real ones do."""
    step = "How many in all? ** " if socratic else ""
    return [
        {"question": f"{prefix} question {i}: {i} + 1?", "answer": f"{step}{i}+1={i + 1}\n#### {i + 1}"}
        for i in range(count)
    ]


def write_openai_layout(data: Path) -> None:
    """grade_school_math/data as OpenAI's repository has it (smaller)."""
    jsonl(data / "train.jsonl", problems("train", 7))
    jsonl(data / "test.jsonl", problems("test", 3))
    jsonl(data / "train_socratic.jsonl", problems("train", 7, socratic=True))
    jsonl(data / "test_socratic.jsonl", problems("test", 3, socratic=True))
    # Model samples of the test questions: no "answer" field; not a split.
    samples = [{"question": r["question"], "ground_truth": r["answer"], "model_solution": "..."}
               for r in problems("test", 3)]
    jsonl(data / "example_model_solutions.jsonl", samples)


def converted(out: Path, split: str) -> list[dict[str, object]]:
    return pq.read_table(out / f"{split}.parquet").to_pylist()


def assert_no_duplicates(rows: list[dict[str, object]]) -> None:
    questions = Counter(row["extra_info"]["question"] for row in rows)  # type: ignore[index]
    assert max(questions.values()) == 1, questions.most_common(3)


def test_openai_data_directory_converts_main_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_openai_layout(tmp_path / "data")
    assert main(["gsm8k", "--input", str(tmp_path / "data"), "--output-dir", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "train: read 7, kept 7, dropped 0 (none)" in printed
    assert "test: read 3, kept 3, dropped 0 (none)" in printed
    assert "skipped example_model_solutions.jsonl: not a GSM8K split file" in printed
    assert "skipped train_socratic.jsonl: socratic config (convert it with --config socratic)" in printed
    assert "skipped test_socratic.jsonl: socratic config" in printed
    for split in ("train", "test"):
        rows = converted(tmp_path / "out", split)
        assert_no_duplicates(rows)
        assert not any("**" in row["extra_info"]["answer"] for row in rows)  # type: ignore[index]


def test_openai_data_directory_converts_socratic_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_openai_layout(tmp_path / "data")
    argv = ["gsm8k", "--input", str(tmp_path / "data"), "--output-dir", str(tmp_path / "out"), "--config", "socratic"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "train: read 7, kept 7" in printed and "test: read 3, kept 3" in printed
    assert "skipped train.jsonl: main config (convert it with --config main)" in printed
    rows = converted(tmp_path / "out", "train")
    assert_no_duplicates(rows)
    assert all("**" in row["extra_info"]["answer"] for row in rows)  # type: ignore[index]


def test_hugging_face_layout_keeps_the_configs_apart(tmp_path: Path) -> None:
    root = tmp_path / "gsm8k"
    for config, socratic in (("main", False), ("socratic", True)):
        (root / config).mkdir(parents=True)
        train = problems("train", 6, socratic)
        # two shards of one split: read together, in shard order
        pq.write_table(pa.Table.from_pylist(train[:4]), root / config / "train-00000-of-00002.parquet")
        pq.write_table(pa.Table.from_pylist(train[4:]), root / config / "train-00001-of-00002.parquet")
        pq.write_table(pa.Table.from_pylist(problems("test", 2, socratic)), root / config / "test-00000-of-00001.parquet")
    (root / "README.md").write_text("dataset card")
    report = gsm8k.convert(root, tmp_path / "main")
    assert (report.splits["train"].kept, report.splits["test"].kept) == (6, 2)
    assert report.skipped["README.md"] == "not a GSM8K split file"
    assert report.skipped["socratic/train-00000-of-00002.parquet"].startswith("socratic config")
    rows = converted(tmp_path / "main", "train")
    assert [row["extra_info"]["index"] for row in rows] == list(range(6))
    assert [row["reward_model"]["ground_truth"] for row in rows] == [str(i + 1) for i in range(6)]
    assert not any("**" in row["extra_info"]["answer"] for row in rows)  # type: ignore[index]

    socratic = gsm8k.convert(root, tmp_path / "socratic", config="socratic")
    assert socratic.splits["train"].kept == 6
    assert all("**" in row["extra_info"]["answer"] for row in converted(tmp_path / "socratic", "train"))  # type: ignore[index]


def test_one_split_in_two_places_is_an_error_not_a_merge(tmp_path: Path) -> None:
    jsonl(tmp_path / "raw" / "train.jsonl", problems("train", 2))
    (tmp_path / "raw" / "main").mkdir()
    pq.write_table(pa.Table.from_pylist(problems("train", 2)), tmp_path / "raw" / "main" / "train-00000-of-00001.parquet")
    with pytest.raises(InputFormatError, match=r"main train split is in 2 places .*Point --input at one copy"):
        gsm8k.convert(tmp_path / "raw", tmp_path / "out")


def test_a_socratic_file_in_a_main_folder_is_skipped(tmp_path: Path) -> None:
    jsonl(tmp_path / "raw" / "main" / "train.jsonl", problems("train", 2))
    jsonl(tmp_path / "raw" / "main" / "train_socratic.jsonl", problems("train", 2, socratic=True))
    report = gsm8k.convert(tmp_path / "raw", tmp_path / "out")
    assert report.splits["train"].kept == 2
    assert report.skipped == {"main/train_socratic.jsonl": "a socratic file in a main folder"}


@pytest.mark.skipif(
    not os.environ.get("OMNI_GSM8K_DATA_DIR"),
    reason="set OMNI_GSM8K_DATA_DIR to grade-school-math's grade_school_math/data to run",
)
def test_real_grade_school_math_data_directory(tmp_path: Path) -> None:
    report = gsm8k.convert(Path(os.environ["OMNI_GSM8K_DATA_DIR"]), tmp_path)
    assert (report.splits["train"].kept, report.splits["test"].kept) == (7473, 1319)
    assert sum(sum(split.dropped.values()) for split in report.splits.values()) == 0
    for split in ("train", "test"):
        assert_no_duplicates(converted(tmp_path, split))
