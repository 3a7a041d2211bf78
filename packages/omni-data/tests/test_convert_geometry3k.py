from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from omni_data.convert import geometry3k
from omni_data.errors import InputFormatError

# verl-omni 203c2c5c, data_process/geo3k.py, spelled here as it spells them (raw strings),
# independently of the module under test.
VERL_OMNI_SYSTEM = (
    r"You are a geometry reasoning assistant. Start every response with the literal tag <think>. "
    r"Put all reasoning between <think> and </think>. Immediately after </think>, give only the final answer in "
    r'\boxed{}. Do not write any text or whitespace before <think>. Do not write labels such as "Your reasoning"; '
    "output the tags themselves.\n\n"
    'A valid response to the question "What is 1+1?" is exactly:\n'
    r"<think>1+1=2.</think>\boxed{2}"
    "\n\nThe opening <think> tag is mandatory. Beginning directly with reasoning and later writing only </think> "
    "is invalid."
)
VERL_OMNI_INSTRUCTION = (
    r"Your first output characters must be <think>. Enclose the reasoning in <think> and </think>, then "
    r"immediately output the final answer in \boxed{}. Output the literal tags, not a description of them. "
    r"An implicit opening is invalid: you must explicitly write <think> before the first reasoning word."
)

# The release's columns (later revisions add id, choices and ground_truth; nobody reads them).
IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
SCHEMA = pa.schema(
    [("images", pa.list_(IMAGE)), ("problem", pa.string()), ("answer", pa.string()), ("id", pa.int64()),
     ("choices", pa.list_(pa.string())), ("ground_truth", pa.string())]
)


def verl_omni_row(example: dict[str, Any], split: str, index: int) -> dict[str, Any]:
    """What verl-omni's build_rl_row returns for a good example (images as the source dicts)."""
    answer = str(example["answer"]).strip()
    return {
        "data_source": "hiyouga/geometry3k",
        "prompt": [
            {"role": "system", "content": VERL_OMNI_SYSTEM},
            {"role": "user", "content": example["problem"] + " " + VERL_OMNI_INSTRUCTION},
        ],
        "images": example["images"],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": example["problem"]},
    }


def example(problem: str | None, answer: str | None, images: list[dict[str, Any]] | None, i: int = 0) -> dict[str, Any]:
    return {"images": images, "problem": problem, "answer": answer, "id": i, "choices": ["1", "2", "3", "4"],
            "ground_truth": "A"}


def shard(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)


def write_release(root: Path, media: Any) -> dict[str, list[dict[str, Any]]]:
    """hiyouga/geometry3k as downloaded: data/<split>-*.parquet (train in two shards here)."""
    png = {"bytes": media.image_bytes("PNG", seed=1), "path": "img_diagram.png"}
    png_no_path = {"bytes": media.image_bytes("PNG", seed=2), "path": None}
    jpeg = {"bytes": media.image_bytes("JPEG", seed=3), "path": "b.jpg"}
    truncated = {"bytes": media.truncated_jpeg(), "path": "c.jpg"}
    train_a = [
        example("<image>Find x. Round to the nearest tenth, if necessary.", " 3 ", [png]),  # kept: index 0
        example("  <image>Find the area.\n", "2\\sqrt{221}", [png_no_path]),  # kept as written: index 1
        example("   ", "3", [png]),  # empty_problem
        example(None, "3", [png]),  # empty_problem (null)
        example("<image>Find y.", " ", [png]),  # empty_answer
        example("<image>Find y.", None, [png]),  # empty_answer (null)
    ]
    train_b = [
        example("<image>Find z.", "4", []),  # no_images
        example("<image>Find z.", "4", None),  # no_images (null)
        example("Find z.", "4", [png]),  # placeholder_mismatch: none in the text
        example("<image><image>Find z.", "4", [png]),  # placeholder_mismatch: two for one
        example("<image>Find w.", "5", [{"bytes": None, "path": "only/a/path.png"}]),  # image_without_bytes
        example("<image>Find w.", "5", [{"bytes": b"not an image", "path": "d.png"}]),  # unreadable_image
        example("<image>Compare <image>them.", "\\frac{40}{3}", [jpeg, png]),  # kept: index 12
        example("<image>Find v.", "7", [truncated]),  # kept (header reads): index 13
    ]
    validation = [example("<image>Find m \\angle 1.", "60", [png], 100)]
    test = [example("<image>Find x.", "12", [jpeg], 200), example("<image>Find y.", "1.5", [png_no_path], 201)]
    data = root / "data"
    shard(data / "train-00000-of-00002.parquet", train_a)
    shard(data / "train-00001-of-00002.parquet", train_b)
    shard(data / "validation-00000-of-00001.parquet", validation)
    shard(data / "test-00000-of-00001.parquet", test)
    (root / "README.md").write_text("---\nlicense: mit\n---\n")
    return {"train": train_a + train_b, "validation": validation, "test": test}


def read_rows(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist()


def test_rows_are_verl_omnis_field_by_field(tmp_path: Path, media: Any) -> None:
    source = write_release(tmp_path / "raw", media)
    report = geometry3k.convert(tmp_path / "raw", tmp_path / "out")
    assert list(report.outputs) == ["train", "validation", "test"]
    kept = {"train": [0, 1, 12, 13], "validation": [0], "test": [0, 1]}  # source positions
    for split, indices in kept.items():
        rows = read_rows(tmp_path / "out" / f"{split}.parquet")
        expected = [verl_omni_row(source[split][i], split, i) for i in indices]
        assert len(rows) == len(expected)
        for row, want in zip(rows, expected, strict=True):
            assert row.keys() == want.keys()
            for key in want:
                assert row[key] == want[key], (split, key)


def test_prompt_keeps_the_problem_as_written(tmp_path: Path, media: Any) -> None:
    source = write_release(tmp_path / "raw", media)
    geometry3k.convert(tmp_path / "raw", tmp_path / "out")
    rows = read_rows(tmp_path / "out" / "train.parquet")
    user = rows[1]["prompt"][1]["content"]
    # The problem's own spaces and newline stay; one space joins it to the instruction.
    assert user == "  <image>Find the area.\n " + VERL_OMNI_INSTRUCTION
    assert rows[1]["extra_info"]["question"] == "  <image>Find the area.\n"
    assert rows[0]["reward_model"]["ground_truth"] == "3"  # " 3 " stripped
    assert rows[2]["images"] == [source["train"][12]["images"][0], source["train"][12]["images"][1]]  # order kept
    assert rows[1]["images"] == [{"bytes": source["train"][1]["images"][0]["bytes"], "path": None}]


def test_every_drop_reason_is_counted(tmp_path: Path, media: Any) -> None:
    write_release(tmp_path / "raw", media)
    (tmp_path / "raw" / "data" / "extra-00000-of-00001.parquet").write_bytes(b"")  # not a split: skipped
    report = geometry3k.convert(tmp_path / "raw", tmp_path / "out")
    text = report.format()
    assert (
        "train: read 14, kept 4, dropped 10 (empty_answer=2, empty_problem=2, image_without_bytes=1, "
        "no_images=2, placeholder_mismatch=2, unreadable_image=1)" in text
    )
    assert "validation: read 1, kept 1, dropped 0 (none)" in text
    assert "test: read 2, kept 2, dropped 0 (none)" in text
    assert report.skipped == {"data/extra-00000-of-00001.parquet": "not a Geometry3K split (train, validation, test)"}


def test_full_decode_also_drops_truncated_images(tmp_path: Path, media: Any) -> None:
    write_release(tmp_path / "raw", media)
    report = geometry3k.convert(tmp_path / "raw", tmp_path / "out", full_decode=True)
    train = report.splits["train"]
    assert (train.kept, train.dropped["unreadable_image"]) == (3, 2)
    rows = read_rows(tmp_path / "out" / "train.parquet")
    assert [r["extra_info"]["index"] for r in rows] == [0, 1, 12]  # indices stay source positions


@pytest.mark.parametrize("missing", ["train", "test"])
def test_train_and_test_are_required(tmp_path: Path, media: Any, missing: str) -> None:
    write_release(tmp_path / "raw", media)
    for path in (tmp_path / "raw" / "data").glob(f"{missing}-*.parquet"):
        path.unlink()
    with pytest.raises(InputFormatError, match=f"No {missing} shards"):
        geometry3k.convert(tmp_path / "raw", tmp_path / "out")


def test_two_copies_of_a_shard_are_refused(tmp_path: Path, media: Any) -> None:
    write_release(tmp_path / "raw" / "snapshots" / "a", media)
    write_release(tmp_path / "raw" / "snapshots" / "b", media)
    with pytest.raises(InputFormatError, match="the same shard in two places"):
        geometry3k.convert(tmp_path / "raw", tmp_path / "out")


def test_validation_is_optional(tmp_path: Path, media: Any) -> None:
    write_release(tmp_path / "raw", media)
    (tmp_path / "raw" / "data" / "validation-00000-of-00001.parquet").unlink()
    report = geometry3k.convert(tmp_path / "raw", tmp_path / "out")
    assert list(report.outputs) == ["train", "test"]
    assert not (tmp_path / "out" / "validation.parquet").exists()


def test_converted_rows_load_with_their_images(tmp_path: Path, media: Any, fake_processor: Any) -> None:
    from omni_data import RLDataset

    write_release(tmp_path / "raw", media)
    geometry3k.convert(tmp_path / "raw", tmp_path / "out", full_decode=True)
    dataset = RLDataset(tmp_path / "out" / "train.parquet", fake_processor)
    fake_processor.calls.clear()
    dataset[2]  # two images, two placeholders
    [call] = fake_processor.calls
    assert len(call["images"]) == 2
    assert call["text"][0].startswith("system: You are a geometry reasoning assistant.")
    # The stand-in template joins content parts with a space: "Compare " + " " + <IMAGE>.
    assert "user: <IMAGE> Compare  <IMAGE> them. Your first output" in call["text"][0]
