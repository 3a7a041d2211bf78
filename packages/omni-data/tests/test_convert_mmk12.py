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
    test = [record(7, "Pick one:\n(A) 1\n(B) 2", "A", {"bytes": jpeg, "path": "g.jpg"})]
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
    assert "test: read 1, kept 1, dropped 0 (none)" in printed

    rows = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert [r["extra_info"]["id"] for r in rows] == ["mmk12-0", "mmk12-1", "mmk12-6"]
    first = rows[0]
    assert first["data_source"] == "mmk12"
    assert first["images"] == [{"bytes": images["png"], "path": "a.png"}]  # byte-identical
    assert rows[1]["images"][0]["bytes"] == images["jpeg"]
    system, user = first["prompt"]
    assert system["role"] == "system" and "<think>" in system["content"]
    assert "<answer>" in system["content"] and "\\boxed{" in system["content"]
    assert user == {"role": "user", "content": "<image>Which shape is shown? A. circle B. square C. triangle D. hexagon"}
    assert first["reward_model"] == {"style": "rule", "ground_truth": "B"}
    info = first["extra_info"]
    assert json.loads(info["options"]) == {"A": "circle", "B": "square", "C": "triangle", "D": "hexagon"}
    assert (info["split"], info["index"], info["subject"], info["answer_type"]) == ("train", 0, "math", "choice")
    assert json.loads(rows[1]["extra_info"]["options"]) == {}
    test = pq.read_table(tmp_path / "out" / "test.parquet").to_pylist()
    assert json.loads(test[0]["extra_info"]["options"]) == {"A": "1", "B": "2"}


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
