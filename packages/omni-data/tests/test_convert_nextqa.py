"""NExT-QA converter: TinyLLaVA-Video-R1's NextQA layout (a JSONL beside an extracted
``NextQA/`` tree), every drop reason, verl-omni 8f82b0f5's split, and the rows read back."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from omni_data import DatasetConfig, RLDataset, builtin
from omni_data.convert import nextqa
from omni_data.errors import InputFormatError

PROBLEM = (
    "What does the boy do after he picks up the ball?\nOptions:\n"
    "A. He throws it.\nB. He kicks it.\nC. He runs away.\nD. He sits down.\nE. He laughs."
)
OPTIONS = {"A": "He throws it.", "B": "He kicks it.", "C": "He runs away.", "D": "He sits down.", "E": "He laughs."}
CLIP = "./NextQA/NExTVideo/0001/first.mp4"


def write_clip(path: Path, *, seconds: float = 1.0, fps: int = 4, size: int = 32, shade: int = 0) -> Path:
    """An mp4 of frames brightening by 30 a frame and a 440 Hz tone (``omni_data.builtin.write_clip``:
    PyAV's bundled libav, no ffmpeg binary)."""
    rate = 16_000
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = [np.full((size, size, 3), (shade + 30 * i) % 256, dtype=np.uint8) for i in range(int(seconds * fps))]
    tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(int(seconds * rate)) / rate)).astype(np.float32)[None]
    return builtin.write_clip(path, frames, fps, tone, rate)


def rec(pid: int, **overrides: Any) -> dict[str, Any]:
    base = {
        "problem_id": pid,
        "problem": PROBLEM,
        "data_type": "video",
        "problem_type": ["temporal", "reasoning"],
        "solution": "<answer>A</answer>",
        "video_filename": CLIP,
    }
    base.update(overrides)
    return base


def write_dataset(root: Path) -> None:
    write_clip(root / "NextQA/NExTVideo/0001/first.mp4")
    write_clip(root / "NextQA/NExTVideo/0002/second.mp4", shade=100)
    write_clip(root.parent / "outside.mp4")  # exists, but outside the dataset directory
    (root / "NextQA/link.mp4").symlink_to(root.parent / "outside.mp4")
    lines = [
        json.dumps(rec(1)),  # index 0: kept
        "",  # blank: skipped, not counted (but the index counts it)
        json.dumps(rec(2, solution=" <ANSWER> c </ANSWER> ", problem="  " + PROBLEM + "\n")),  # index 2: kept
        "{not json",  # invalid_json
        json.dumps(["a list"]),  # invalid_record
        json.dumps(rec(3, problem="   ")),  # empty_problem
        json.dumps(rec(4, data_type="image")),  # unsupported_modality
        json.dumps(rec(5, problem=PROBLEM.replace("\nE. He laughs.", ""))),  # invalid_options: no E
        json.dumps(rec(6, problem=PROBLEM + "\nc) again")),  # invalid_options: C twice
        json.dumps(rec(7, problem=PROBLEM.replace("C. He runs away.", "C. "))),  # invalid_options: C has no text
        json.dumps(rec(8, solution="C")),  # invalid_solution: untagged
        json.dumps(rec(9, solution="<answer>F</answer>")),  # invalid_solution: not A-E
        json.dumps(rec(10, solution="<answer>A</answer> because")),  # invalid_solution: text after
        json.dumps({k: v for k, v in rec(11).items() if k != "solution"}),  # invalid_solution: none
        json.dumps(rec(12, video_filename="./NextQA/NExTVideo/0003/none.mp4")),  # missing_video
        json.dumps(rec(13, video_filename="../outside.mp4")),  # missing_video: leaves the directory
        json.dumps(rec(14, video_filename=str(root.parent / "outside.mp4"))),  # missing_video: absolute
        json.dumps(rec(15, video_filename="NextQA/link.mp4")),  # missing_video: symlink out
        json.dumps(rec(16, video_filename="")),  # missing_video: blank
        json.dumps(rec(17, video_filename="NextQA/NExTVideo/0002/second.mp4", solution="<answer>e</answer>",
                       problem="Who?\ne) Eve\nd) Dan\nc) Cy\nb) Bo\na) Al", problem_type=None)),  # kept
    ]
    (root / nextqa.DEFAULT_INPUT_FILE).write_text("\n".join(lines) + "\n")


def test_converts_with_every_drop_reason(tmp_path: Path) -> None:
    root = tmp_path / "NextQA-release"
    write_dataset(root)
    report = nextqa.convert(root, tmp_path / "out", validation_ratio=0.5, seed=0)
    assert report.format().splitlines()[1:4] == [
        "  nextqa_0-30s.jsonl: read 19, kept 3, dropped 16 (empty_problem=1, invalid_json=1, invalid_options=3, "
        "invalid_record=1, invalid_solution=4, missing_video=5, unsupported_modality=1)",
        "  nextqa_0-30s.jsonl: answer: A=1, C=1, E=1",
        "  nextqa_0-30s.jsonl: split: train=1, validation=2",
    ]
    first = str((root / "NextQA/NExTVideo/0001/first.mp4").resolve())
    second = str((root / "NextQA/NExTVideo/0002/second.mp4").resolve())
    # Two clips, ratio 0.5: min(2 - 1, max(1, round(1.0))) = 1 clip to validation; which one
    # is random.Random(0)'s shuffle of the two sorted paths (checked in the split test).
    out = tmp_path / "out"
    rows = {split: pq.read_table(out / f"{split}.parquet").to_pylist() for split in ("train", "validation")}
    by_id = {r["extra_info"]["problem_id"]: r for split_rows in rows.values() for r in split_rows}
    assert sorted(by_id) == ["1", "17", "2"]
    held_out = {r["videos"][0]["video"] for r in rows["validation"]}
    assert held_out.isdisjoint(r["videos"][0]["video"] for r in rows["train"])
    # verl-omni's build_rl_row for record 1 at line 0 (split set by the clip's side):
    assert by_id["1"] == {
        "data_source": "nextqa",
        "prompt": [
            {"role": "system", "content": nextqa.SYSTEM_PROMPT},
            {"role": "user", "content": "<video>" + PROBLEM},
        ],
        "ability": "video_qa",
        "reward_model": {"style": "rule", "ground_truth": "<answer>A</answer>"},
        "extra_info": {
            "split": "validation" if first in held_out else "train",
            "index": 0,
            "problem_id": "1",
            "dataset": "TinyLLaVA-Video-R1-NextQA",
            "problem_type": '["temporal", "reasoning"]',
            "raw_problem": PROBLEM,
            "raw_solution": "<answer>A</answer>",
            "video_filename": CLIP,
            "options": json.dumps(OPTIONS),
        },
        "videos": [{"video": first, "fps": 1.0, "min_pixels": 25088, "max_pixels": 100352, "max_frames": 32}],
    }
    assert by_id["2"]["reward_model"]["ground_truth"] == "<answer>C</answer>"  # letter upper-cased, tags rewritten
    assert by_id["2"]["extra_info"]["raw_solution"] == " <ANSWER> c </ANSWER> "
    assert by_id["2"]["extra_info"]["index"] == 2  # the blank line counts
    assert by_id["2"]["prompt"][1]["content"] == "<video>" + PROBLEM  # stripped
    assert by_id["17"]["videos"][0]["video"] == second
    assert by_id["17"]["extra_info"]["problem_type"] == "null"
    assert by_id["17"]["extra_info"]["options"] == json.dumps({"E": "Eve", "D": "Dan", "C": "Cy", "B": "Bo", "A": "Al"})


def expected_validation_clips(clips: list[str], ratio: float, seed: int) -> set[str]:
    """verl-omni's split, written out again: sorted paths, one seeded shuffle, the head goes
    to validation (at least one clip, never all)."""
    pool = list(clips)
    pool.sort()
    random.Random(seed).shuffle(pool)
    wanted = int(round(len(pool) * ratio))
    wanted = max(wanted, 1)
    wanted = min(wanted, len(pool) - 1)
    return set(pool[:wanted])


@pytest.mark.parametrize(("clips", "ratio", "seed"), [(12, 0.25, 42), (12, 0.05, 7), (7, 0.5, 3), (2, 0.9, 1),
                                                      (40, 0.05, 42), (40, 0.125, 0)])
def test_the_split_is_verl_omnis(tmp_path: Path, clips: int, ratio: float, seed: int) -> None:
    root = tmp_path / "data"
    names = [f"NextQA/NExTVideo/{i % 5}/clip{i}.mp4" for i in range(clips)]
    for name in names:  # the converter only checks that the file exists
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"not decoded here")
    uses = [i % clips for i in range(3 * clips)]  # every clip three times, in a scrambled order
    random.Random(99).shuffle(uses)
    records = [rec(i, video_filename=names[clip]) for i, clip in enumerate(uses)]
    (root / "qa.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    nextqa.convert(root, tmp_path / "out", input_file="qa.jsonl", validation_ratio=ratio, seed=seed)
    train = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    validation = pq.read_table(tmp_path / "out" / "validation.parquet").to_pylist()
    absolute = [str((root / name).resolve()) for name in names]
    wanted = expected_validation_clips(absolute, ratio, seed)
    assert {r["videos"][0]["video"] for r in validation} == wanted
    assert {r["videos"][0]["video"] for r in train} == set(absolute) - wanted
    assert {r["extra_info"]["split"] for r in validation} == {"validation"}
    assert {r["extra_info"]["split"] for r in train} == {"train"}
    for rows in (train, validation):  # each file keeps the input order
        indices = [r["extra_info"]["index"] for r in rows]
        assert indices == sorted(indices)
    assert len(train) + len(validation) == 3 * clips


def test_no_validation_file_without_a_ratio(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "v.mp4").parent.mkdir(parents=True)
    (root / "v.mp4").write_bytes(b"x")
    (root / "qa.jsonl").write_text(json.dumps(rec(1, video_filename="v.mp4")))
    report = nextqa.convert(root, tmp_path / "out", input_file="qa.jsonl", validation_ratio=0)
    assert list(report.outputs) == ["train"]
    assert not (tmp_path / "out" / "validation.parquet").exists()
    with pytest.raises(InputFormatError, match="needs at least two"):  # one clip cannot be split
        nextqa.convert(root, tmp_path / "out", input_file="qa.jsonl")


def test_input_problems_are_explained(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    with pytest.raises(InputFormatError, match="annotation file not found"):
        nextqa.convert(root, tmp_path / "out")
    (tmp_path / "elsewhere.jsonl").write_text("{}")
    with pytest.raises(InputFormatError, match="outside the input directory"):
        nextqa.convert(root, tmp_path / "out", input_file="../elsewhere.jsonl")
    (root / "qa.jsonl").write_bytes(json.dumps(rec(1)).encode() + b"\n\xff\xfe\n")
    with pytest.raises(InputFormatError, match=r"qa.jsonl:2 is not UTF-8"):
        nextqa.convert(root, tmp_path / "out", input_file="qa.jsonl")
    (root / "qa.jsonl").write_text(json.dumps(rec(1, data_type="audio")))
    with pytest.raises(InputFormatError, match=r"No NExT-QA row kept .*unsupported_modality"):
        nextqa.convert(root, tmp_path / "out", input_file="qa.jsonl")
    with pytest.raises(ValueError, match="validation_ratio must be in .*fps must be.*pixel limits.*max_frames"):
        nextqa.convert(root, tmp_path / "out", validation_ratio=1.0, fps=0, min_pixels=10, max_pixels=5, max_frames=1)


def budget_free(processor: Any) -> Any:
    """The fake processor without a video pixel budget of its own, and with the token names ``use_audio_in_video`` counts soundtrack tokens by (none appear in
    its ids)."""
    processor.video_processor = SimpleNamespace(patch_size=16)
    processor.tokenizer = SimpleNamespace(convert_tokens_to_ids=lambda token: -1)
    processor.video_token, processor.audio_token = "<|video_pad|>", "<|audio_pad|>"
    return processor


def test_rows_read_back_with_their_soundtracks(tmp_path: Path, fake_processor: Any) -> None:
    root = tmp_path / "NextQA-release"
    write_dataset(root)
    nextqa.convert(root, tmp_path / "out", validation_ratio=0.5, seed=0)
    files = [tmp_path / "out" / f"{split}.parquet" for split in ("train", "validation")]
    dataset = RLDataset(files, budget_free(fake_processor), DatasetConfig(use_audio_in_video=True))
    assert len(dataset) == 3, dataset.report.format()
    fake_processor.calls.clear()
    item = dataset[0]
    [call] = fake_processor.calls
    # One second at 4 fps sampled at the entry's 1 fps: one frame wanted, lifted to Qwen's
    # min_frames of 4 (all the clip has); and the clip's one-second soundtrack at 16 kHz.
    assert [v.shape[0] for v in call["videos"]] == [4]
    assert [len(a) for a in call["audio"]] == [16_000]
    assert item["data_source"] == "nextqa"
    video_part = item["raw_prompt"][1]["content"][0]
    assert video_part["video"]["max_pixels"] == 128 * 28 * 28


def test_rows_read_back_with_a_processor_that_has_a_pixel_budget(tmp_path: Path, fake_processor: Any) -> None:
    root = tmp_path / "NextQA-release"
    write_dataset(root)
    nextqa.convert(root, tmp_path / "out", validation_ratio=0.5, seed=0)
    dataset = RLDataset(tmp_path / "out" / "validation.parquet", fake_processor)  # Qwen's processors have one
    assert len(dataset) == 2
