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
        rec(2, solution=" <answer> D </answer> "),  # kept, as written (stripped)
        rec(3, problem=""),  # empty_problem
        rec(4, data_type="video_audio"),  # unsupported_modality
        rec(5, options=["A. one", "a. two"]),  # invalid_options: a letter repeats
        rec(6, options=["A one", "B. two"]),  # invalid_options: no marker
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
        rec(18, solution="<answer>c</answer>"),  # kept: lower case stays lower case
        rec(19, options=["C) rain", "a: a dog"], solution="<ANSWER>a</ANSWER>"),  # kept: options reformatted
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
        "train: read 20, kept 4, dropped 16 (blank_answer_label=3, empty_problem=1, invalid_options=2, "
        "invalid_record=1, invalid_solution=2, missing_audio=2, missing_image=1, path_traversal=3, "
        "unsupported_modality=1)" in printed
    )
    assert "validation: read 1, kept 1, dropped 0 (none)" in printed

    rows = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    image, audio = str((root / "media" / "img.png").resolve()), str((root / "media" / "clip.wav").resolve())
    # verl-omni a1139baf, avqa.py build_rl_row, for record 1 at index 0:
    assert rows[0] == {
        "data_source": "avqa_r1_6k",
        "prompt": [
            {"role": "system", "content": avqa.SYSTEM_PROMPT},
            {"role": "user", "content": "<image><audio>What makes the sound?\nOptions:\n"
             "A. a dog barking\nB. a car horn\nC. rain\nD. a piano"},
        ],
        "ability": "audio_visual_qa",
        "reward_model": {"style": "rule", "ground_truth": "<answer>B</answer>"},
        "extra_info": {
            "split": "train", "index": 0, "problem_id": "1", "dataset": "AVQA-R1-6K",
            "problem_type": "multiple choice", "raw_problem": "What makes the sound?",
            "raw_solution": "<answer>B</answer>",
            "options": json.dumps({"A": "a dog barking", "B": "a car horn", "C": "rain", "D": "a piano"}),
        },
        "images": [{"image": image}],
        "audios": [audio],
    }
    assert rows[1]["reward_model"]["ground_truth"] == "<answer> D </answer>"
    assert rows[1]["extra_info"]["raw_solution"] == " <answer> D </answer> "
    assert rows[2]["reward_model"]["ground_truth"] == "<answer>c</answer>"
    assert rows[2]["extra_info"]["index"] == 18
    assert rows[3]["prompt"][1]["content"].endswith("\nOptions:\nC. rain\nA. a dog")
    assert rows[3]["reward_model"]["ground_truth"] == "<ANSWER>a</ANSWER>"
    validation = pq.read_table(tmp_path / "out" / "validation.parquet").to_pylist()
    assert validation[0]["reward_model"]["ground_truth"] == "<answer>A</answer>"


def test_normalize_labels_is_a_flag(tmp_path: Path, media: Any) -> None:
    root = tmp_path / "AVQA_R1"
    write_dataset(root, media)
    argv = ["avqa", "--input", str(root), "--output-dir", str(tmp_path / "out"), "--normalize-labels"]
    assert main(argv) == 0
    rows = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert [r["reward_model"]["ground_truth"] for r in rows] == [
        "<answer>B</answer>", "<answer>D</answer>", "<answer>C</answer>", "<answer>A</answer>"
    ]
    assert rows[2]["extra_info"]["raw_solution"] == "<answer>c</answer>"  # the source stays visible


def write_release(root: Path, media: Any) -> None:
    """The AVQA_R1 release as verl-omni's converter reads it: train/ and valid/, each with
    its JSON file and its media, paths relative to the split's folder."""
    for folder, name, seed in (("train", "omni_rl_format_train.json", 0), ("valid", "omni_rl_format_valid.json", 5)):
        (root / folder / "images").mkdir(parents=True)
        (root / folder / "audios").mkdir()
        for i in range(2):
            media.picture(seed=seed + i).save(root / folder / "images" / f"{i}.jpg", format="JPEG")
            media.wav(root / folder / "audios" / f"{i}.wav", seconds=0.5 + 0.25 * (seed + i))
        records = [
            rec(10 * seed + i, path={"image": f"images/{i}.jpg", "audio": f"audios/{i}.wav"}) for i in range(2)
        ]
        if folder == "train":  # media of another split's folder: verl-omni refuses it (missing_image)
            records.append(rec(99, path={"image": "../valid/images/0.jpg", "audio": "audios/0.wav"}))
        (root / folder / name).write_text(json.dumps(records))
    (root / "notes.json").write_text("{}")


def test_reads_the_release_layout(tmp_path: Path, media: Any, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "AVQA_R1"
    write_release(root, media)
    assert main(["avqa", "--input", str(root), "--output-dir", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "train: read 3, kept 2, dropped 1 (path_traversal=1)" in printed
    assert "validation: read 2, kept 2, dropped 0 (none)" in printed
    assert "skipped notes.json: not a split file of the AVQA_R1 release layout" in printed
    train = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert train[1]["images"] == [{"image": str((root / "train" / "images" / "1.jpg").resolve())}]
    assert train[1]["audios"] == [str((root / "train" / "audios" / "1.wav").resolve())]
    validation = pq.read_table(tmp_path / "out" / "validation.parquet").to_pylist()
    assert [row["extra_info"]["split"] for row in validation] == ["validation", "validation"]
    assert validation[0]["images"] == [{"image": str((root / "valid" / "images" / "0.jpg").resolve())}]


def test_a_missing_release_split_is_reported(tmp_path: Path, media: Any) -> None:
    root = tmp_path / "AVQA_R1"
    write_release(root, media)
    shutil.rmtree(root / "valid")
    report = avqa.convert(root, tmp_path / "out")
    assert list(report.splits) == ["train"]
    assert report.skipped["valid/omni_rl_format_valid.json"].startswith("not found")


def test_no_split_files_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "raw").mkdir()
    assert main(["avqa", "--input", str(tmp_path / "raw"), "--output-dir", str(tmp_path / "out")]) == 2
    assert "expected the AVQA_R1 release layout (train/omni_rl_format_train.json" in capsys.readouterr().err


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
    argv = ["avqa", "--input", str(root), "--output-dir", str(tmp_path / "out"), "--strict-split"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "train: read 3, kept 1, dropped 2 (shares_media_with_eval=2)" in printed
    assert "validation: read 1, kept 1, dropped 0 (none)" in printed
    train = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert [row["extra_info"]["problem_id"] for row in train] == ["3"]


def test_by_default_the_shared_rows_are_kept_as_verl_omni_keeps_them(tmp_path: Path, media: Any) -> None:
    root = tmp_path / "AVQA_R1"
    write_leaky_dataset(root, media)
    report = avqa.convert(root, tmp_path / "out")
    assert (report.splits["train"].kept, report.splits["train"].dropped) == (3, {})
    assert main(["avqa", "--input", str(root), "--output-dir", str(tmp_path / "cli")]) == 0
    assert pq.read_table(tmp_path / "cli" / "train.parquet").num_rows == 3


def test_converted_rows_load_with_their_media(tmp_path: Path, media: Any, fake_processor: Any) -> None:
    from omni_data import RLDataset

    root = tmp_path / "AVQA_R1"
    write_release(root, media)
    avqa.convert(root, tmp_path / "out")
    dataset = RLDataset(tmp_path / "out" / "train.parquet", fake_processor)
    assert len(dataset) == 2
    fake_processor.calls.clear()
    item = dataset[0]
    [call] = fake_processor.calls
    assert len(call["images"]) == 1 and len(call["audio"]) == 1
    assert call["text"][0].startswith(f"system: {avqa.SYSTEM_PROMPT}\nuser: <IMAGE> <AUDIO> What makes the sound?")
    assert item["reward_model"]["ground_truth"] == "<answer>B</answer>"
