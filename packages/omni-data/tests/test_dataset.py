from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from omni_data import DatasetConfig, InputFormatError, MediaError, RLDataset, RowError, rl_row, write_rl_parquet


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def make_row(text: str, index: int, **media: Any) -> dict[str, Any]:
    return rl_row(
        data_source="test",
        messages=user(text),
        ground_truth=str(index),
        ability="unit",
        extra_info={"split": "train", "index": index},
        **media,
    )


@pytest.fixture
def media_dir(tmp_path: Path, media: Any) -> Path:
    root = tmp_path / "media"
    root.mkdir()
    media.picture(64, 64, seed=3).save(root / "pic.png")
    media.wav(root / "tone16k.wav", seconds=1.0, rate=16_000)
    media.wav(root / "tone8k.wav", seconds=1.0, rate=8_000)
    media.mp4(root / "clip.mp4", frames=8, fps=4)
    for i in range(3):
        media.picture(48, 48, seed=10 + i).save(root / f"frame{i}.png")
    return root


def test_every_modality_is_decoded_and_encoded(tmp_path: Path, media: Any, media_dir: Path, fake_processor: Any) -> None:
    png = media.image_bytes("PNG", width=96, height=64)
    rows = [
        make_row("just text please", 0),
        make_row("<image>what is this", 1, images=[{"bytes": png, "path": "x.png"}]),
        make_row("and <image> this", 2, images=[{"bytes": None, "path": str(media_dir / "pic.png")}]),
        make_row("<audio>listen", 3, audios=[str(media_dir / "tone16k.wav")]),
        make_row("<video>watch", 4, videos=[str(media_dir / "clip.mp4")]),
    ]
    path = write_rl_parquet(rows, tmp_path / "mixed.parquet")
    # A video given as frame images cannot share a column with video file paths: own file.
    frames = [make_row("<video>frames", 5, videos=[[str(media_dir / f"frame{i}.png") for i in range(3)]])]
    frames_path = write_rl_parquet(frames, tmp_path / "frames.parquet")
    dataset = RLDataset([path, frames_path], fake_processor, DatasetConfig(max_prompt_length=512))
    assert len(dataset) == 6 and dataset.report.kept == 6 and not dataset.report.dropped
    fake_processor.calls.clear()

    items = [dataset[i] for i in range(6)]
    calls = fake_processor.calls
    assert items[0]["input_ids"].tolist() == list(range(5))  # user: just text please assistant:
    assert items[0]["multi_modal_inputs"] == {}
    assert items[0]["raw_prompt"] == user("just text please")
    # Images: RGB PIL, resized by Qwen's loader to multiples of 32 within the pixel budget.
    assert [im.size for im in calls[1]["images"]] == [(96, 64)]
    assert set(items[1]["multi_modal_inputs"]) == {"pixel_values"}
    assert items[1]["raw_prompt"][0]["content"][0] == {"type": "image", "image": {"bytes": png, "path": "x.png"}}
    assert calls[2]["images"][0].mode == "RGB"
    # Audio: 1 s at 16 kHz through Qwen's loader.
    assert [len(a) for a in calls[3]["audio"]] == [16_000]
    # Video file: 8 frames at 4 fps sampled at 2 fps -> 4 frames; frame lists padded to even.
    assert calls[4]["videos"][0].shape[0] == 4 and calls[4]["do_sample_frames"] is False
    assert calls[5]["videos"][0].shape[0] == 4
    assert calls[5]["video_metadata"][0]["fps"] == 2.0
    for i, item in enumerate(items):
        assert item["reward_model"] == {"style": "rule", "ground_truth": str(i)}
        assert item["index"] == i and item["data_source"] == "test" and item["ability"] == "unit"
        assert item["attention_mask"].tolist() == [1] * len(item["input_ids"])
    assert items[4]["source"] == f"{path}:4" and items[5]["source"] == f"{frames_path}:0"


def test_writer_refuses_mixed_column_forms(tmp_path: Path) -> None:
    rows = [make_row("<image>", 0, images=["/a.png"]), make_row("<image>", 1, images=[{"bytes": b"x", "path": "b"}])]
    with pytest.raises(ValueError, match=r"Use one form per column within a file"):
        write_rl_parquet(rows, tmp_path / "mixed.parquet")


def test_audio_is_resampled_to_the_processor_rate(tmp_path: Path, media_dir: Path, fake_processor_8k: Any) -> None:
    rows = [make_row("<audio>a", 0, audios=[str(media_dir / "tone16k.wav")]),
            make_row("<audio>b", 1, audios=[str(media_dir / "tone8k.wav")])]
    dataset = RLDataset(write_rl_parquet(rows, tmp_path / "a.parquet"), fake_processor_8k)
    fake_processor_8k.calls.clear()
    dataset[0], dataset[1]
    assert [len(call["audio"][0]) for call in fake_processor_8k.calls] == [8_000, 8_000]


def test_audio_bytes_decode_without_a_file(tmp_path: Path, media_dir: Path, fake_processor: Any) -> None:
    data = (media_dir / "tone8k.wav").read_bytes()
    rows = [make_row("<audio>a", 0, audios=[{"bytes": data, "path": "clip.wav"}])]
    dataset = RLDataset(write_rl_parquet(rows, tmp_path / "a.parquet"), fake_processor)
    fake_processor.calls.clear()
    dataset[0]
    assert len(fake_processor.calls[0]["audio"][0]) == 16_000  # 8 kHz bytes resampled to 16 kHz


def bad_rows(media_dir: Path) -> list[dict[str, Any]]:
    return [
        make_row("fine", 0),
        make_row("<image>x", 1, images=[{"bytes": b"not an image", "path": "broken.png"}]),
        make_row("<image>x", 2, images=[{"bytes": None, "path": str(media_dir / "gone.png")}]),
        make_row("<audio>x", 3, audios=[{"bytes": b"RIFF garbage", "path": "broken.wav"}]),
        make_row("<image>x", 4),  # placeholder without an image
        make_row("word " * 40, 5),  # 42 tokens: over the budget of 20
        make_row("<video>x", 6, videos=[str(media_dir / "broken.mp4")]),
    ]


def test_default_fails_loudly_at_load_naming_row_and_file(tmp_path: Path, media_dir: Path, fake_processor: Any) -> None:
    path = write_rl_parquet(bad_rows(media_dir), tmp_path / "bad.parquet")
    with pytest.raises(MediaError, match=rf"row 1 of {path}: cannot decode image \(inline bytes from broken.png\)"):
        RLDataset(path, fake_processor, DatasetConfig(max_prompt_length=20))


@pytest.mark.parametrize(
    ("index", "error", "message"),
    [
        (2, MediaError, r"row 0 of .*: image file .*gone.png does not exist"),
        (3, MediaError, r"row 0 of .*: cannot decode audio \(inline bytes from broken.wav\)"),
        (4, RowError, r"row 0 of .*: the prompt has more <image> placeholders than 'images' entries \(0\)"),
    ],
)
def test_each_bad_row_error_names_the_problem(
    tmp_path: Path, media_dir: Path, fake_processor: Any, index: int, error: type[Exception], message: str
) -> None:
    path = write_rl_parquet([bad_rows(media_dir)[index]], tmp_path / "one.parquet")
    with pytest.raises(error, match=message):
        RLDataset(path, fake_processor)


def test_skip_mode_counts_every_reason(tmp_path: Path, media_dir: Path, fake_processor: Any) -> None:
    (media_dir / "broken.mp4").write_bytes(b"not a video container")
    path = write_rl_parquet(bad_rows(media_dir), tmp_path / "bad.parquet")
    dataset = RLDataset(path, fake_processor, DatasetConfig(max_prompt_length=20, on_bad_row="skip"))
    report = dataset.report
    assert (report.total, report.kept, len(dataset)) == (7, 1, 1)
    assert dict(report.dropped) == {
        "bad_image": 1, "missing_file": 1, "bad_audio": 1, "media_count_mismatch": 1, "overlong_prompt": 1,
        "bad_video": 1,
    }
    assert report.format() == (
        "RL dataset: read 7 rows, kept 1, dropped 6 (bad_audio=1, bad_image=1, bad_video=1, "
        "media_count_mismatch=1, missing_file=1, overlong_prompt=1); longest kept prompt 3 tokens"
    )
    assert dataset[0]["index"] == 0
    assert report.examples["missing_file"].startswith(f"row 2 of {path}: image file ")


def test_rows_without_a_required_extra_info_key_are_bad_rows(tmp_path: Path, fake_processor: Any) -> None:
    rows = [make_row("a", 0), make_row("b", 1), make_row("c", 2)]
    rows[0]["extra_info"]["spoken_text"] = "Hello there."
    rows[2]["extra_info"]["spoken_text"] = "  "
    path = write_rl_parquet(rows, tmp_path / "speech.parquet")
    needs = DatasetConfig(required_extra_info=("spoken_text",))
    with pytest.raises(RowError, match=r"row 1 of .*: extra_info\['spoken_text'\] must be a non-empty string, got None"):
        RLDataset(path, fake_processor, needs)
    dataset = RLDataset(path, fake_processor, DatasetConfig(required_extra_info=("spoken_text",), on_bad_row="skip"))
    assert dict(dataset.report.dropped) == {"missing_extra_info": 2}
    assert [dataset[i]["extra_info"]["spoken_text"] for i in range(len(dataset))] == ["Hello there."]


def test_without_load_checks_a_bad_medium_still_raises_when_read(
    tmp_path: Path, media_dir: Path, fake_processor: Any
) -> None:
    path = write_rl_parquet(bad_rows(media_dir)[:2], tmp_path / "bad.parquet")
    config = DatasetConfig(filter_overlong_prompts=False, check_media_at_load=False)
    dataset = RLDataset(path, fake_processor, config)
    assert len(dataset) == 2 and fake_processor.calls == []  # nothing decoded at load
    dataset[0]
    with pytest.raises(MediaError, match=r"row 1 of .*bad.parquet: cannot decode image"):
        dataset[1]


def test_file_removed_after_load_raises_instead_of_skipping(tmp_path: Path, media: Any, fake_processor: Any) -> None:
    image = tmp_path / "later-gone.png"
    media.picture().save(image)
    dataset = RLDataset(write_rl_parquet([make_row("<image>x", 0, images=[str(image)])], tmp_path / "r.parquet"),
                        fake_processor)
    image.unlink()
    with pytest.raises(MediaError, match=r"image file .*later-gone.png does not exist"):
        dataset[0]


def test_many_files_and_wrong_column_types(tmp_path: Path, fake_processor: Any) -> None:
    a = write_rl_parquet([make_row("one", 0), make_row("two", 1)], tmp_path / "a.parquet")
    b = write_rl_parquet([make_row("three", 2)], tmp_path / "b.parquet")
    dataset = RLDataset([a, b], fake_processor)
    assert [dataset[i]["reward_model"]["ground_truth"] for i in range(3)] == ["0", "1", "2"]
    assert dataset[2]["source"] == f"{b}:0"

    wrong = make_row("x", 0)
    wrong["reward_model"] = "7"
    c = write_rl_parquet([wrong], tmp_path / "c.parquet")
    with pytest.raises(RowError, match=r"row 0 of .*c.parquet: column 'reward_model' must be a dict with 'ground_truth'"):
        RLDataset(c, fake_processor)


def test_missing_columns_and_files_are_input_errors(tmp_path: Path, fake_processor: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"prompt": ["x"]}), tmp_path / "p.parquet")
    with pytest.raises(InputFormatError, match=r"lacks required column\(s\) \['data_source', 'ability'") as raised:
        RLDataset(tmp_path / "p.parquet", fake_processor)
    assert "`uv run trainer convert <dataset>" in str(raised.value)  # the README's command
    with pytest.raises(InputFormatError, match=r"RL parquet file .*nope.parquet does not exist"):
        RLDataset(tmp_path / "nope.parquet", fake_processor)


def test_config_reports_every_problem_at_once() -> None:
    with pytest.raises(ValueError, match=r"max_prompt_length must be positive, got 0; on_bad_row must be"):
        DatasetConfig(max_prompt_length=0, on_bad_row="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="filter_overlong_prompts needs check_media_at_load=True"):
        DatasetConfig(check_media_at_load=False)


def test_rows_without_a_ground_truth_are_bad_rows_never_scored(tmp_path: Path, fake_processor: Any) -> None:
    rows = [make_row(f"q{i}", i) for i in range(4)]
    rows[1]["reward_model"]["ground_truth"] = None
    rows[2]["reward_model"]["ground_truth"] = "  "
    path = write_rl_parquet(rows, tmp_path / "truth.parquet")
    with pytest.raises(RowError, match=r"row 1 of .*truth.parquet: reward_model.ground_truth is None; a row without") as caught:
        RLDataset(path, fake_processor)
    assert caught.value.reason == "empty_ground_truth"
    dataset = RLDataset(path, fake_processor, DatasetConfig(on_bad_row="skip"))
    assert (dataset.report.kept, dict(dataset.report.dropped)) == (2, {"empty_ground_truth": 2})
    assert "dropped 2 (empty_ground_truth=2)" in dataset.report.format()
    assert [dataset[i]["reward_model"]["ground_truth"] for i in range(len(dataset))] == ["0", "3"]
    # A speech stage scores the audio: its rows keep an empty ground truth, as written.
    speech = RLDataset(path, fake_processor, DatasetConfig(require_ground_truth=False))
    assert [speech[i]["reward_model"]["ground_truth"] for i in range(len(speech))] == ["0", None, "  ", "3"]
