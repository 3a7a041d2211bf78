from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from omni_data.convert import avqa
from omni_data.convert.cli import main

OPTIONS = ["A. a dog barking", "B. a car horn", "C. rain", "D. a piano"]


def rec(pid: int, **overrides: Any) -> dict[str, Any]:
    base = {
        "problem_id": pid,
        "problem": "What makes the sound?",
        "data_type": "image_audio",
        "problem_type": "multiple choice",
        "options": OPTIONS,
        "solution": "<answer>B</answer>",
        "path": {"image": "media/img.png", "audio": "media/clip.wav"},
    }
    base.update(overrides)
    return base


def write_dataset(root: Path, media: Any) -> None:
    (root / "media").mkdir(parents=True)
    media.picture().save(root / "media" / "img.png")
    media.wav(root / "media" / "clip.wav")
    media.wav(root.parent / "outside.wav")  # exists, but outside the dataset directory
    (root / "media" / "link.wav").symlink_to(root.parent / "outside.wav")
    train = [
        rec(1),
        rec(2, solution="<answer> D </answer>"),
        rec(3, problem=""),  # empty_problem
        rec(4, data_type="video_audio"),  # unsupported_modality
        rec(5, options=["A. one"]),  # invalid_options
        rec(6, options=["A. one", "C. three"]),  # invalid_options
        rec(7, solution="B"),  # invalid_solution: untagged
        rec(8, solution="<answer>E</answer>"),  # invalid_solution: not an option
        rec(9, path={"image": "media/nope.png", "audio": "media/clip.wav"}),  # missing_image
        rec(10, path={"image": "media/img.png", "audio": "media/nope.wav"}),  # missing_audio
        rec(11, path={"image": "media/img.png"}),  # missing_audio (no audio key)
        rec(12, path={"image": "media/img.png", "audio": "../outside.wav"}),  # path_traversal
        rec(13, path={"image": str(root.parent / "outside.wav"), "audio": "media/clip.wav"}),  # absolute escape
        rec(14, path={"image": "media/img.png", "audio": "media/link.wav"}),  # symlink escape
        "not a record",  # invalid_record
        rec(15, solution="<answer> </answer>"),  # blank_answer_label
        rec(16, solution=""),  # blank_answer_label
        {k: v for k, v in rec(17).items() if k != "solution"},  # blank_answer_label (missing)
        rec(18, solution="<answer>c</answer>"),  # kept: the letter upper-cased
    ]
    (root / "train.json").write_text(json.dumps(train))
    # Validation media of its own (other pixels, a longer clip): nothing leaks.
    media.picture(seed=1).save(root / "media" / "val.png")
    media.wav(root / "media" / "val.wav", seconds=2.0)
    validation = [rec(20, solution="<answer>A</answer>", path={"image": "media/val.png", "audio": "media/val.wav"})]
    (root / "validation.json").write_text(json.dumps(validation))


def test_converts_with_every_drop_reason(tmp_path: Path, media: Any, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "AVQA_R1"
    write_dataset(root, media)
    assert main(["avqa", "--input", str(root), "--output-dir", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert (
        "train: read 19, kept 3, dropped 16 (blank_answer_label=3, empty_problem=1, invalid_options=2, "
        "invalid_record=1, invalid_solution=2, missing_audio=2, missing_image=1, path_traversal=3, "
        "unsupported_modality=1)" in printed
    )
    assert "validation: read 1, kept 1, dropped 0 (none)" in printed

    rows = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    first = rows[0]
    assert set(first) == {"data_source", "prompt", "ability", "reward_model", "extra_info", "images", "audios"}
    assert first["data_source"] == "avqa_r1_6k"
    assert first["images"] == [str((root / "media" / "img.png").resolve())]
    assert first["audios"] == [str((root / "media" / "clip.wav").resolve())]
    [message] = first["prompt"]
    assert message["role"] == "user"
    assert message["content"].startswith("<image><audio>What makes the sound?\nA. a dog barking\nB. a car horn\n")
    assert message["content"].endswith(avqa.INSTRUCTION)
    assert first["reward_model"] == {"style": "rule", "ground_truth": "<answer>B</answer>"}
    assert rows[1]["reward_model"]["ground_truth"] == "<answer>D</answer>"  # whitespace normalised
    assert rows[2]["reward_model"]["ground_truth"] == "<answer>C</answer>"  # letter upper-cased
    assert rows[2]["extra_info"]["answer"] == "C"
    info = first["extra_info"]
    assert (info["split"], info["index"], info["problem_id"], info["answer"]) == ("train", 0, "1", "B")
    assert json.loads(info["options"]) == {"A": "a dog barking", "B": "a car horn", "C": "rain", "D": "a piano"}
    validation = pq.read_table(tmp_path / "out" / "validation.parquet").to_pylist()
    assert validation[0]["reward_model"]["ground_truth"] == "<answer>A</answer>"


def test_split_file_that_is_not_a_list_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "train.json").write_text(json.dumps({"problem": "x"}))
    assert main(["avqa", "--input", str(tmp_path / "raw"), "--output-dir", str(tmp_path / "out")]) == 2
    assert "train.json must hold a JSON list of records, got dict" in capsys.readouterr().err


def test_split_that_loses_every_row_still_writes_a_file(tmp_path: Path) -> None:
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "train.json").write_text(json.dumps([rec(1, data_type="video")]))
    report = avqa.convert(tmp_path / "raw", tmp_path / "out")
    assert report.splits["train"].kept == 0
    assert pq.read_table(tmp_path / "out" / "train.parquet").num_rows == 0


def write_leaky_dataset(root: Path, media: Any) -> None:
    """Train rows 1-2 reuse validation media under other names (same bytes); row 3 does not."""
    (root / "media").mkdir(parents=True)
    media.picture(seed=0).save(root / "media" / "val.png")
    media.wav(root / "media" / "val.wav", seconds=1.0)
    media.picture(seed=1).save(root / "media" / "own.png")
    media.wav(root / "media" / "own.wav", seconds=1.5)
    shutil.copy(root / "media" / "val.png", root / "media" / "copy_of_val.png")
    shutil.copy(root / "media" / "val.wav", root / "media" / "copy_of_val.wav")
    train = [
        rec(1, path={"image": "media/copy_of_val.png", "audio": "media/own.wav"}),  # image leaks
        rec(2, path={"image": "media/own.png", "audio": "media/copy_of_val.wav"}),  # audio leaks
        rec(3, path={"image": "media/own.png", "audio": "media/own.wav"}),
    ]
    validation = [rec(10, path={"image": "media/val.png", "audio": "media/val.wav"})]
    (root / "train.json").write_text(json.dumps(train))
    (root / "validation.json").write_text(json.dumps(validation))


def test_strict_split_drops_train_rows_sharing_media_content_with_validation(
    tmp_path: Path, media: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "AVQA_R1"
    write_leaky_dataset(root, media)
    assert main(["avqa", "--input", str(root), "--output-dir", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "train: read 3, kept 1, dropped 2 (shares_media_with_eval=2)" in printed
    assert "validation: read 1, kept 1, dropped 0 (none)" in printed
    train = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert [row["extra_info"]["problem_id"] for row in train] == ["3"]


def test_no_strict_split_keeps_the_shared_rows(tmp_path: Path, media: Any) -> None:
    root = tmp_path / "AVQA_R1"
    write_leaky_dataset(root, media)
    report = avqa.convert(root, tmp_path / "out", strict_split=False)
    assert (report.splits["train"].kept, report.splits["train"].dropped) == (3, {})
    argv = ["avqa", "--input", str(root), "--output-dir", str(tmp_path / "cli"), "--no-strict-split"]
    assert main(argv) == 0
    assert pq.read_table(tmp_path / "cli" / "train.parquet").num_rows == 3
