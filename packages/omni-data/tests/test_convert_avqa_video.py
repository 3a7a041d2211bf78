"""``omni_data.convert.avqa_video``: verl-omni 8af0d948's AVQA-on-video rows, drop reasons,
refusals and manifest, and the rows read back with each clip's soundtrack as an audio item."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from omni_data import DatasetConfig, RLDataset
from omni_data.convert import avqa_video
from omni_data.convert.cli import main
from omni_data.errors import InputFormatError

sys.path.insert(0, str(Path(__file__).parent))
from test_convert_nextqa import budget_free, write_clip  # noqa: E402

CHOICES = ["a dog barking", "a car horn", "a piano", "rain"]


def question(qid: Any, **overrides: Any) -> dict[str, Any]:
    record = {"id": qid, "video_id": 7, "video_name": "clip_a", "question_text": " What makes the sound? ",
              "multi_choice": list(CHOICES), "answer": 2, "question_relation": "Both", "question_type": "Which"}
    record.update(overrides)
    return record


def write_release(root: Path) -> tuple[Path, Path, Path]:
    videos = root / "videos"
    write_clip(videos / "clip_a.mp4")
    write_clip(videos / "clip_b.mp4", shade=100)
    write_clip(root / "outside.mp4")
    (videos / "link.mp4").symlink_to(root / "outside.mp4")
    train = [
        question(1),  # kept, index 0
        "not a question",  # invalid_record
        question(2, question_text="  "),  # empty_question
        question(3, multi_choice=CHOICES[:3]),  # invalid_options: three
        question(4, multi_choice=[*CHOICES[:3], " "]),  # invalid_options: blank text
        question(5, multi_choice=[*CHOICES[:3], CHOICES[0] + " "]),  # duplicate_options (once stripped)
        question(6, answer=4),  # invalid_answer
        question(7, answer=True),  # invalid_answer: a bool is not an index
        question(8, answer="1"),  # invalid_answer: text
        question(9, video_name="../outside"),  # invalid_video_name: a path
        question(10, video_name=""),  # invalid_video_name
        question(11, video_name="clip_none"),  # missing_video
        question(12, video_name="link"),  # missing_video: a symlink out of the directory
        question(None),  # invalid_question_id
        question(True),  # invalid_question_id: a bool
        question("q13", video_name="clip_b", answer=0),  # kept, index 15
    ]
    validation = [question(100, video_name="clip_b", answer=3), question(101, answer=1)]
    files = root / "train_qa.json", root / "val_qa.json"
    for path, records in zip(files, (train, validation), strict=True):
        path.write_text(json.dumps(records))
    return files[0], files[1], videos


def test_converts_as_verl_omni_with_every_drop_reason(tmp_path: Path) -> None:
    train, validation, videos = write_release(tmp_path)
    report = avqa_video.convert(train, validation, videos, tmp_path / "out")
    assert report.format().splitlines()[1:5] == [
        "  train: read 16, kept 2, dropped 14 (duplicate_options=1, empty_question=1, invalid_answer=3, "
        "invalid_options=2, invalid_question_id=2, invalid_record=1, invalid_video_name=2, missing_video=2)",
        "  train: answer: A=1, C=1",
        "  validation: read 2, kept 2, dropped 0 (none)",
        "  validation: answer: B=1, D=1",
    ]
    rows = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    clip_a = str((videos / "clip_a.mp4").resolve())
    assert rows[0] == {  # verl-omni's build_rl_row for question 1
        "data_source": "avqa_video",
        "prompt": [{"role": "system", "content": avqa_video.SYSTEM_PROMPT},
                   {"role": "user", "content": "<video>What makes the sound?\nOptions:\nA. a dog barking\n"
                                               "B. a car horn\nC. a piano\nD. rain"}],
        "ability": "audio_visual_qa",
        "reward_model": {"style": "rule", "ground_truth": "<answer>C</answer>"},
        "extra_info": {"split": "train", "index": 0, "problem_id": "1", "video_id": "7", "video_name": "clip_a",
                       "dataset": "AVQA", "raw_question": "What makes the sound?", "answer_index": 2,
                       "answer_letter": "C", "options": json.dumps(dict(zip("ABCD", CHOICES, strict=True))),
                       "question_relation": "Both", "question_type": "Which"},
        "videos": [{"video": clip_a, "fps": 1.0, "max_frames": 32, "min_pixels": 25088, "max_pixels": 100352}],
    }
    assert rows[1]["extra_info"]["index"] == 15 and rows[1]["extra_info"]["problem_id"] == "q13"
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["annotation_sources"]["train"] == {
        "annotation_sha256": hashlib.sha256(train.read_bytes()).hexdigest(), "questions": 16,
        "unique_question_ids": 13, "unique_video_names": 5}
    assert manifest["source_split_overlap"] == {"question_ids": 0, "video_names": 2}
    assert manifest["validation"] == {"input": 2, "kept": 2, "dropped": {}}
    assert manifest["train"]["dropped"]["invalid_answer"] == 3


def test_what_verl_omni_refuses_is_refused(tmp_path: Path) -> None:
    train, validation, videos = write_release(tmp_path)
    out = tmp_path / "out"
    avqa_video.convert(train, validation, videos, out)
    with pytest.raises(InputFormatError, match="already holds train.parquet, validation.parquet, manifest.json"):
        avqa_video.convert(train, validation, videos, out)
    avqa_video.convert(train, validation, videos, out, overwrite=True, max_frames=8)
    assert pq.read_table(out / "train.parquet").to_pylist()[0]["videos"][0]["max_frames"] == 8
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps([question(1), question(1)]))
    with pytest.raises(InputFormatError, match="question id '1' appears twice"):
        avqa_video.convert(twice, validation, videos, tmp_path / "o2")
    both = tmp_path / "both.json"
    both.write_text(json.dumps([question(1)]))
    with pytest.raises(InputFormatError, match="1 question ids are in both splits"):
        avqa_video.convert(train, both, videos, tmp_path / "o3")
    twice.write_text("{}")
    with pytest.raises(InputFormatError, match="a JSON list of questions, got dict"):
        avqa_video.convert(twice, validation, videos, tmp_path / "o4")
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps([question(500, video_name="clip_none")]))
    with pytest.raises(InputFormatError, match="No AVQA validation question kept .*missing_video"):
        avqa_video.convert(train, empty, videos, tmp_path / "o5")
    with pytest.raises(ValueError, match="fps and max_frames must be positive"):
        avqa_video.convert(train, validation, videos, tmp_path / "o6", fps=float("nan"))


def test_the_command_takes_verl_omnis_spellings(tmp_path: Path) -> None:
    train, validation, videos = write_release(tmp_path)
    assert main(["avqa_video", "--train_json", str(train), "--validation_json", str(validation),
                 "--video_root", str(videos), "--output_dir", str(tmp_path / "out"), "--fps", "2"]) == 0
    assert pq.read_table(tmp_path / "out" / "validation.parquet").to_pylist()[0]["videos"][0]["fps"] == 2.0


def test_rows_read_back_with_each_soundtrack_as_an_audio_item(tmp_path: Path, fake_processor: Any) -> None:
    train, validation, videos = write_release(tmp_path)
    avqa_video.convert(train, validation, videos, tmp_path / "out")
    dataset = RLDataset([tmp_path / "out" / "validation.parquet"], budget_free(fake_processor),
                        DatasetConfig(soundtrack_as_audio=True))
    assert len(dataset) == 2, dataset.report.format()
    fake_processor.calls.clear()
    item = dataset[0]
    [call] = fake_processor.calls
    assert [v.shape[0] for v in call["videos"]] == [4] and [len(a) for a in call["audio"]] == [16_000]
    assert [part["type"] for part in item["raw_prompt"][1]["content"]] == ["video", "audio", "text"]
