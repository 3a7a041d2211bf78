from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from omni_data.convert import audiomcq
from omni_data.errors import InputFormatError

CHOICES = ["a dog barking", "a car horn", "rain on a roof", "a piano"]
PROMPT_TAIL = "\nOutput the final answer in <answer> </answer>."


def rec(n: int, audio: str = "clips/0.wav", **overrides: Any) -> dict[str, Any]:
    base = {
        "id": f"q{n}",
        "source_dataset": "clotho",
        "question": "What makes the sound?",
        "choices": CHOICES,
        "answer": "a car horn",
        "audio_path": audio,
    }
    base.update(overrides)
    return base


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def write_audio(root: Path, media: Any, clips: int) -> None:
    for i in range(clips):
        media.wav(root / "clips" / f"{i}.wav", seconds=0.1 + 0.05 * i)
    (root / "clips" / "empty.wav").touch()
    (root / "clips" / "folder.wav").mkdir()
    media.wav(root.parent / "outside.wav", seconds=0.1)  # exists, but outside the audio root
    (root / "clips" / "link.wav").symlink_to(root.parent / "outside.wav")


def read_both(output_dir: Path) -> list[dict[str, Any]]:
    tables = [pq.read_table(output_dir / f"{split}.parquet") for split in ("train", "validation")]
    return [row for table in tables for row in table.to_pylist()]


def drop_records(root: Path) -> list[Any]:
    """One record per way to be dropped, with the reason verl-omni gives it."""
    return [
        ("invalid_question", rec(0, question=None)),
        ("invalid_question", rec(0, question=" \n")),
        ("invalid_question", rec(0, question="<audio> What is it?")),
        ("invalid_choices", rec(0, choices="a, b")),
        ("invalid_choices", rec(0, choices=["only one"], answer="only one")),
        ("invalid_choices", rec(0, choices=[f"c{i}" for i in range(27)], answer="c0")),
        ("invalid_choices", rec(0, choices=["a dog", " "], answer="a dog")),
        ("invalid_choices", rec(0, choices=["a dog", 7], answer="a dog")),
        ("invalid_choices", rec(0, choices=["a dog", "<audio>"], answer="a dog")),
        ("ambiguous_answer", rec(0, answer="a trumpet")),
        ("ambiguous_answer", rec(0, answer="A car horn")),  # the answer must be a choice as written
        ("ambiguous_answer", rec(0, choices=["Dog", "“dog.”"], answer="Dog")),  # equal under the reward
        ("ambiguous_answer", rec(0, choices=["ｄｏｇ", "dog"], answer="dog")),  # NFKC
        ("ambiguous_answer", rec(0, choices=["dog", "dog"], answer="dog")),
        ("invalid_audio_path", rec(0, audio_path=None)),
        ("invalid_audio_path", rec(0, audio_path="")),
        ("invalid_audio_path", rec(0, audio_path=["clips/0.wav"])),
        ("invalid_audio_path", rec(0, audio_path="clips/0.wav\x00")),
        ("audio_outside_root", rec(0, audio="../outside.wav")),
        ("audio_outside_root", rec(0, audio=str(root.parent / "outside.wav"))),
        ("audio_outside_root", rec(0, audio="clips/link.wav")),  # a symlink that leaves the root
        ("missing_audio", rec(0, audio="clips/nope.wav")),
        ("missing_audio", rec(0, audio="clips/empty.wav")),
        ("missing_audio", rec(0, audio="clips/folder.wav")),
        ("missing_audio", rec(0, audio=" ")),
    ]


def test_every_drop_reason_is_counted(tmp_path: Path, media: Any) -> None:
    root = tmp_path / "AudioMCQ"
    write_audio(root, media, clips=3)
    drops = drop_records(root)
    kept = [rec(100, "clips/0.wav"), rec(101, "clips/1.wav"), rec(102, str(root / "clips" / "2.wav"))]
    jsonl = write_jsonl(tmp_path / "data.jsonl", [record for _, record in drops] + kept)
    report = audiomcq.convert(jsonl, root, tmp_path / "out", validation_size=1)
    audit = report.splits["records"]
    expected: dict[str, int] = {}
    for reason, _ in drops:
        expected[reason] = expected.get(reason, 0) + 1
    assert dict(audit.dropped) == expected
    assert set(expected) == {
        "invalid_question", "invalid_choices", "ambiguous_answer", "invalid_audio_path",
        "audio_outside_root", "missing_audio",
    }
    assert audit.kept == 3 and audit.total == len(drops) + 3
    assert report.splits["train"].kept + report.splits["validation"].kept == 3
    assert "records: read 28, kept 3, dropped 25 (ambiguous_answer=5, audio_outside_root=3" in report.format()


def test_rows_read_back_as_verl_omni_writes_them(tmp_path: Path, media: Any) -> None:
    root = tmp_path / "AudioMCQ"
    write_audio(root, media, clips=2)
    records: list[Any] = [
        rec(1, "clips/0.wav", question="  What makes the sound?\n"),
        rec(2, "clips/1.wav", choices=[" Violin ", "cello"], answer=" Violin "),
    ]
    del records[1]["id"], records[1]["source_dataset"]
    jsonl = tmp_path / "data.jsonl"
    jsonl.write_text("\n" + json.dumps(records[0]) + "\n\n" + json.dumps(records[1]) + "\n")  # blank lines count
    report = audiomcq.convert(jsonl, root, tmp_path / "out", validation_size=1, seed=0)
    assert report.outputs == {
        "train": str(tmp_path / "out" / "train.parquet"),
        "validation": str(tmp_path / "out" / "validation.parquet"),
    }
    rows = {row["extra_info"]["index"]: row for row in read_both(tmp_path / "out")}
    # verl-omni's build_rl_row for the record on line 2 (index 1), plus its split:
    first = rows[1]
    split = first["extra_info"]["split"]
    assert first == {
        "data_source": "Harland/AudioMCQ-StrongAC-GeminiCoT",
        "prompt": [{"role": "user", "content": "<audio>\n[Question] What makes the sound?\n"
                    "Please choose the answer from the following options:\n"
                    "A. a dog barking\nB. a car horn\nC. rain on a roof\nD. a piano" + PROMPT_TAIL}],
        "ability": "audio_mcq",
        "reward_model": {"style": "rule", "ground_truth": {
            "answer": "a car horn", "choices": CHOICES, "correct_choice_index": 1, "correct_choice_indices": [1],
        }},
        "extra_info": {"index": 1, "source_dataset": "clotho", "source_id": "q1", "split": split},
        "audios": [str((root / "clips" / "0.wav").resolve())],
    }
    # Choices and answer as written; no id or source: the index and "".
    second = rows[3]
    assert second["prompt"][0]["content"].endswith("options:\nA.  Violin \nB. cello" + PROMPT_TAIL)
    assert second["reward_model"]["ground_truth"] == {
        "answer": " Violin ", "choices": [" Violin ", "cello"],
        "correct_choice_index": 0, "correct_choice_indices": [0],
    }
    assert (second["extra_info"]["source_id"], second["extra_info"]["source_dataset"]) == ("3", "")
    assert {split, second["extra_info"]["split"]} == {"train", "validation"}


def reference_validation_audio(rows: list[dict[str, Any]], validation_size: int, seed: int) -> set[str]:
    """verl-omni's split_rows, from its facts: one group per distinct audio path (the absolute
    path written in the row), paths in sorted order, shuffled by random.Random(seed); the
    first validation_size groups are validation."""
    distinct = []
    for row in rows:
        if row["audios"][0] not in distinct:
            distinct.append(row["audios"][0])
    distinct.sort()
    rng = random.Random(seed)
    rng.shuffle(distinct)
    return set(distinct[:validation_size])


def write_shared_audio_dataset(tmp_path: Path, media: Any) -> tuple[Path, Path]:
    """12 recordings, 30 questions: recording i is asked about (i % 3) + 1 times."""
    root = tmp_path / "AudioMCQ"
    write_audio(root, media, clips=12)
    records = [rec(10 * i + k, f"clips/{i}.wav") for i in range(12) for k in range(i % 3 + 1)]
    records.insert(5, rec(999, "clips/nope.wav"))  # dropped before the split is drawn
    random.Random(7).shuffle(records)
    return write_jsonl(tmp_path / "data.jsonl", records), root


@pytest.mark.parametrize("seed", [0, 42, 1234])
def test_the_split_is_asset_disjoint_and_verl_omnis(tmp_path: Path, media: Any, seed: int) -> None:
    jsonl, root = write_shared_audio_dataset(tmp_path, media)
    report = audiomcq.convert(jsonl, root, tmp_path / "out", validation_size=4, seed=seed)
    train = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    validation = pq.read_table(tmp_path / "out" / "validation.parquet").to_pylist()
    train_audio = {row["audios"][0] for row in train}
    validation_audio = {row["audios"][0] for row in validation}
    assert len(validation_audio) == 4 and len(train_audio) == 8
    assert not train_audio & validation_audio
    assert validation_audio == reference_validation_audio(train + validation, 4, seed)
    assert all(row["extra_info"]["split"] == "train" for row in train)
    assert all(row["extra_info"]["split"] == "validation" for row in validation)
    # Rows keep their order in the file within each split.
    for rows in (train, validation):
        indices = [row["extra_info"]["index"] for row in rows]
        assert indices == sorted(indices)
    assert (report.splits["train"].kept, report.splits["validation"].kept) == (len(train), len(validation))
    assert len(train) + len(validation) == 24


def test_the_split_is_deterministic_and_follows_the_seed(tmp_path: Path, media: Any) -> None:
    jsonl, root = write_shared_audio_dataset(tmp_path, media)

    def held_out(seed: int, out: str) -> list[int]:
        audiomcq.convert(jsonl, root, tmp_path / out, validation_size=4, seed=seed)
        rows = pq.read_table(tmp_path / out / "validation.parquet").to_pylist()
        return [row["extra_info"]["index"] for row in rows]

    assert held_out(42, "a") == held_out(42, "b")
    assert len({tuple(held_out(seed, f"s{seed}")) for seed in range(5)}) > 1


def test_converted_rows_load_with_their_audio(tmp_path: Path, media: Any, fake_processor: Any) -> None:
    from omni_data import RLDataset

    jsonl, root = write_shared_audio_dataset(tmp_path, media)
    audiomcq.convert(jsonl, root, tmp_path / "out", validation_size=4)
    dataset = RLDataset(tmp_path / "out" / "validation.parquet", fake_processor)
    fake_processor.calls.clear()
    item = dataset[0]
    [call] = fake_processor.calls
    assert len(call["audio"]) == 1 and "images" not in call
    assert call["text"][0].startswith("user: <AUDIO> \n[Question] What makes the sound?")
    assert item["reward_model"]["ground_truth"]["correct_choice_indices"] == [1]


def test_line_endings_count_as_python_text_mode_counts_them(tmp_path: Path, media: Any) -> None:
    root = tmp_path / "AudioMCQ"
    write_audio(root, media, clips=3)
    lines = [json.dumps(rec(i, f"clips/{i}.wav")) for i in range(3)]
    jsonl = tmp_path / "data.jsonl"
    jsonl.write_bytes(f"{lines[0]}\r\n\r\n{lines[1]}\r{lines[2]}".encode())  # a lone \r ends a line too
    audiomcq.convert(jsonl, root, tmp_path / "out", validation_size=1)
    rows = read_both(tmp_path / "out")
    assert sorted((row["extra_info"]["index"], row["extra_info"]["source_id"]) for row in rows) == [
        (0, "q0"), (2, "q1"), (3, "q2"),
    ]


# --- input that cannot be converted -------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('["a", "list"]', r"data.jsonl:2 holds a JSON list, not an object"),
        ('"text"', r"data.jsonl:2 holds a JSON str, not an object"),
        ('{"question": ', r"data.jsonl:2 is not valid JSON"),
    ],
)
def test_a_line_that_is_not_a_record_is_an_error(tmp_path: Path, media: Any, line: str, message: str) -> None:
    root = tmp_path / "AudioMCQ"
    write_audio(root, media, clips=2)
    jsonl = tmp_path / "data.jsonl"
    jsonl.write_text(json.dumps(rec(0)) + "\n" + line + "\n")
    with pytest.raises(InputFormatError, match=message):
        audiomcq.convert(jsonl, root, tmp_path / "out", validation_size=1)
    assert not (tmp_path / "out").exists()


def test_a_line_that_is_not_utf8_is_an_error(tmp_path: Path, media: Any) -> None:
    root = tmp_path / "AudioMCQ"
    write_audio(root, media, clips=2)
    jsonl = tmp_path / "data.jsonl"
    latin1 = json.dumps(rec(1, question="Is it a café?"), ensure_ascii=False).encode("latin-1")
    jsonl.write_bytes(json.dumps(rec(0)).encode() + b"\n" + latin1)
    with pytest.raises(InputFormatError, match=r"data.jsonl:2 is not UTF-8 text \(byte 0xe9"):
        audiomcq.convert(jsonl, root, tmp_path / "out", validation_size=1)


def test_too_few_audio_files_for_both_splits_is_an_error(tmp_path: Path, media: Any) -> None:
    root = tmp_path / "AudioMCQ"
    write_audio(root, media, clips=2)
    records = [rec(0, "clips/0.wav"), rec(1, "clips/0.wav"), rec(2, "clips/nope.wav")]
    jsonl = write_jsonl(tmp_path / "data.jsonl", records)
    with pytest.raises(InputFormatError, match=r"Only 1 distinct audio files .*missing_audio=1.*validation_size=1"):
        audiomcq.convert(jsonl, root, tmp_path / "out", validation_size=1)
    with pytest.raises(ValueError, match="must be >= 1, got 0"):
        audiomcq.convert(jsonl, root, tmp_path / "out", validation_size=0)


def test_missing_inputs_are_errors(tmp_path: Path, media: Any) -> None:
    root = tmp_path / "AudioMCQ"
    write_audio(root, media, clips=2)
    with pytest.raises(InputFormatError, match="Cannot read the AudioMCQ JSONL file"):
        audiomcq.convert(tmp_path / "nope.jsonl", root, tmp_path / "out")
    jsonl = write_jsonl(tmp_path / "data.jsonl", [rec(0)])
    with pytest.raises(InputFormatError, match="Audio root .* does not exist"):
        audiomcq.convert(jsonl, tmp_path / "no-root", tmp_path / "out")


def test_a_prepared_split_is_never_overwritten(tmp_path: Path, media: Any) -> None:
    jsonl, root = write_shared_audio_dataset(tmp_path, media)
    (tmp_path / "out").mkdir()  # an empty directory is fine (verl-omni refuses it)
    audiomcq.convert(jsonl, root, tmp_path / "out", validation_size=4, seed=1)
    before = (tmp_path / "out" / "validation.parquet").read_bytes()
    with pytest.raises(FileExistsError, match="already holds train.parquet, validation.parquet"):
        audiomcq.convert(jsonl, root, tmp_path / "out", validation_size=4, seed=2)
    assert (tmp_path / "out" / "validation.parquet").read_bytes() == before
