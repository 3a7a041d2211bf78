from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from omni_data.convert import mmk12
from omni_data.convert.cli import main


def record(i: int, question: str, answer: str, image: Any, subject: str = "math") -> dict[str, Any]:
    return {"id": f"mmk12-{i}", "question": question, "answer": answer, "subject": subject, "image": image}


def write_shards(root: Path, media: Any) -> dict[str, bytes]:
    png = media.image_bytes("PNG", seed=1)
    jpeg = media.image_bytes("JPEG", seed=2)
    truncated = media.truncated_jpeg()
    train_a = [
        record(0, "Which shape is shown? A. circle B. square C. triangle D. hexagon", "B", {"bytes": png, "path": "a.png"}),
        record(1, "How many dots are in the picture?", "12", {"bytes": jpeg, "path": "b.jpg"}),
        record(2, "", "3", {"bytes": png, "path": "c.png"}),  # empty_question
    ]
    train_b = [
        record(3, "Find x.", "  ", {"bytes": png, "path": "d.png"}),  # empty_answer
        record(4, "Find the area.", "\\frac{3}{2}", None),  # missing_image
        record(5, "Find y.", "0.5", {"bytes": b"definitely not an image", "path": "e.png"}),  # unreadable
        record(6, "Find z.", "7", {"bytes": truncated, "path": "f.jpg"}),  # only a full decode fails
    ]
    test = [
        record(7, "Pick one:\n(A) 1\n(B) 2", "A", {"bytes": jpeg, "path": "g.jpg"}),
        record(8, "Which angle?\nA. 30°\nB) 60°", " b ", {"bytes": png, "path": "h.png"}),
    ]
    root.mkdir(parents=True)
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema(
        [("id", pa.string()), ("question", pa.string()), ("answer", pa.string()), ("subject", pa.string()), ("image", image_type)]
    )
    pq.write_table(pa.Table.from_pylist(train_a, schema=schema), root / "train-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(train_b, schema=schema), root / "train-00001-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(test, schema=schema), root / "test-00000-of-00001.parquet")
    return {"png": png, "jpeg": jpeg}


def test_converts_shards_with_exact_counts_and_inline_bytes(
    tmp_path: Path, media: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    images = write_shards(tmp_path / "raw", media)
    assert main(["mmk12", "--input", str(tmp_path / "raw"), "--output-dir", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    # Header-only check: the truncated JPEG still opens, so it is kept (4 kept of 7).
    assert (
        "train: read 7, kept 3, dropped 4 (empty_answer=1, empty_question=1, missing_image=1, "
        "unreadable_image=1)" in printed
    )
    assert "train: answer_type: choice=1, integer=2" in printed
    assert "test: read 2, kept 2, dropped 0 (none)" in printed

    rows = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert [r["extra_info"]["id"] for r in rows] == ["mmk12-0", "mmk12-1", "mmk12-6"]
    question = "Which shape is shown? A. circle B. square C. triangle D. hexagon"
    # verl-omni a1139baf, mmk12.py make_map_fn, for the first kept record:
    assert rows[0] == {
        "data_source": "mmk12",
        "prompt": [{"role": "user", "content": f"<image>\n{mmk12.INSTRUCTION}\n\n{question}"}],
        "ability": "math_vl",
        "reward_model": {"style": "rule", "ground_truth": "B"},
        "extra_info": {
            "split": "train", "index": 0, "id": "mmk12-0", "dataset": "MMK12", "subject": "math",
            "raw_question": question, "raw_answer": "B", "options": "{}",  # one line: not verl-omni's options
        },
        "images": [{"bytes": images["png"]}],  # byte-identical, no path
    }
    assert rows[1]["images"][0]["bytes"] == images["jpeg"]
    # index counts kept rows (verl-omni filters, then numbers): record 6 is the third kept.
    assert [r["extra_info"]["index"] for r in rows] == [0, 1, 2]
    test = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
    assert json.loads(test[0]["extra_info"]["options"]) == {}  # "(A) 1" is not one of its markers
    assert json.loads(test[1]["extra_info"]["options"]) == {"A": "30°", "B": "60°"}
    assert test[1]["reward_model"]["ground_truth"] == "b"  # as written


def test_inline_options_is_a_flag(tmp_path: Path, media: Any) -> None:
    write_shards(tmp_path / "raw", media)
    argv = ["mmk12", "--input", str(tmp_path / "raw"), "--output-dir", str(tmp_path / "out"), "--inline-options"]
    assert main(argv) == 0
    rows = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert json.loads(rows[0]["extra_info"]["options"]) == {"A": "circle", "B": "square", "C": "triangle", "D": "hexagon"}
    test = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
    assert json.loads(test[0]["extra_info"]["options"]) == {"A": "1", "B": "2"}
    assert json.loads(test[1]["extra_info"]["options"]) == {"A": "30°", "B": "60°"}  # lines still read
    assert rows[0]["prompt"][0]["content"].startswith("<image>\nYou should first think")  # the prompt is the same


def test_full_decode_also_drops_truncated_images(tmp_path: Path, media: Any) -> None:
    write_shards(tmp_path / "raw", media)
    report = mmk12.convert(tmp_path / "raw", tmp_path / "out", full_decode=True)
    train = report.splits["train"]
    assert (train.kept, train.dropped["unreadable_image"]) == (2, 2)


@pytest.mark.parametrize(
    ("answer", "kind"),
    [("C", "choice"), ("A, C", "choice"), ("42", "integer"), ("-3", "integer"), ("2.5", "number"),
     ("3/4", "number"), ("50%", "number"), ("\\frac{1}{2}", "expression"), ("x^2+1", "expression")],
)
def test_answer_type(answer: str, kind: str) -> None:
    assert mmk12.answer_type(answer) == kind


def test_converted_rows_load_with_their_image(tmp_path: Path, media: Any, fake_processor: Any) -> None:
    from omni_data import RLDataset

    write_shards(tmp_path / "raw", media)
    mmk12.convert(tmp_path / "raw", tmp_path / "out", full_decode=True)  # the truncated JPEG would fail the load
    dataset = RLDataset(tmp_path / "out" / "train.parquet", fake_processor)
    fake_processor.calls.clear()
    item = dataset[0]
    [call] = fake_processor.calls
    assert len(call["images"]) == 1 and item["multi_modal_inputs"].keys() == {"pixel_values"}
    assert call["text"][0].startswith("user: <IMAGE> \nYou should first think")
