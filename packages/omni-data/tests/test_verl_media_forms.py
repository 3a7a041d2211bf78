"""The media forms verl-omni's datasets read reach the row (verl-omni a1139baf).

verl-omni's ``RLHFDataset`` and ``QwenOmniRLHFDataset`` extend verl's ``RLHFDataset``,
whose ``_build_messages`` turns an ``images`` entry that is a string into ``{"image": s}``,
a dict into the content part itself (``{"bytes"}`` opened with PIL), a ``videos`` entry
that is a string or frame list into ``{"video": v}``, a dict into the part, and an
``audios`` dict with ``audio``/``audio_url`` into the part; Qwen's loaders then read
``image``/``image_url`` (path, ``file://``, ``data:``), ``audio``/``audio_url``, ``video``
and their settings. Messages whose content is already a list of parts are left as they are.
Each test writes a parquet file in exactly one of those forms and checks what the
processor received.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from omni_data import RLDataset, RowError
from omni_data.rows import MediaRef, media_in_messages, parse_row, raw_prompt

WIDTH, HEIGHT = 96, 64  # the test picture; the fake processor's budget keeps it as it is


@pytest.fixture
def files(tmp_path: Path, media: Any) -> dict[str, Path]:
    root = tmp_path / "media"
    root.mkdir()
    media.picture(WIDTH, HEIGHT, seed=4).save(root / "pic.png")
    media.wav(root / "one_second.wav", seconds=1.0, rate=16_000)
    media.mp4(root / "clip.mp4", frames=8, fps=4)
    for i in range(4):
        media.picture(48, 48, seed=20 + i).save(root / f"frame{i}.png")
    return {
        "png": root / "pic.png",
        "wav": root / "one_second.wav",
        "mp4": root / "clip.mp4",
        **{f"frame{i}": root / f"frame{i}.png" for i in range(4)},
    }


def write(tmp_path: Path, prompt: list[dict[str, Any]], **media: list[Any]) -> Path:
    """One row with exactly these columns, through pyarrow (struct fields inferred)."""
    row = {
        "data_source": "forms",
        "prompt": prompt,
        "ability": "unit",
        "reward_model": {"style": "rule", "ground_truth": "x"},
        "extra_info": {"index": 0},
        **media,
    }
    path = tmp_path / "forms.parquet"
    pq.write_table(pa.Table.from_pylist([row]), path)
    return path


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def processed(path: Path, processor: Any) -> dict[str, Any]:
    """What the processor received when the row was read (the load's own call aside)."""
    dataset = RLDataset(path, processor)
    assert len(dataset) == 1, dataset.report.format()
    processor.calls.clear()
    item = dataset[0]
    [call] = processor.calls
    return {"call": call, "item": item}


def data_uri(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(lambda f: {"image": str(f["png"])}, id="avqa-image-dict"),
        pytest.param(lambda f: {"image": "file://" + str(f["png"])}, id="image-dict-file-uri"),
        pytest.param(lambda f: {"image_url": str(f["png"])}, id="image-url-dict"),
        pytest.param(lambda f: "file://" + str(f["png"]), id="file-uri-string"),
        pytest.param(lambda f: {"bytes": f["png"].read_bytes()}, id="mmk12-bytes-only"),
        pytest.param(lambda f: data_uri("image/png", f["png"].read_bytes()), id="data-uri"),
    ],
)
def test_image_forms(tmp_path: Path, files: dict[str, Path], fake_processor: Any, entry: Any) -> None:
    out = processed(write(tmp_path, user("<image>What is shown?"), images=[entry(files)]), fake_processor)
    [image] = out["call"]["images"]
    assert image.size == (WIDTH, HEIGHT) and image.mode == "RGB"
    assert out["item"]["multi_modal_inputs"].keys() == {"pixel_values"}


def test_image_settings_are_honoured(tmp_path: Path, files: dict[str, Path], fake_processor: Any) -> None:
    # Qwen's fetch_image resizes to resized_* (multiples of the patch factor, 16 * 2 here).
    entry = {"image": str(files["png"]), "resized_height": 64, "resized_width": 128}
    out = processed(write(tmp_path, user("<image>x"), images=[entry]), fake_processor)
    assert out["call"]["images"][0].size == (128, 64)
    assert out["item"]["raw_prompt"][0]["content"][0] == {"type": "image", "image": entry}


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(lambda f: {"audio": str(f["wav"])}, id="audio-dict"),
        pytest.param(lambda f: {"audio_url": "file://" + str(f["wav"])}, id="audio-url-file-uri"),
        pytest.param(lambda f: data_uri("audio/wav", f["wav"].read_bytes()), id="data-uri"),
    ],
)
def test_audio_forms(tmp_path: Path, files: dict[str, Path], fake_processor: Any, entry: Any) -> None:
    out = processed(write(tmp_path, user("<audio>What is heard?"), audios=[entry(files)]), fake_processor)
    assert [len(a) for a in out["call"]["audio"]] == [16_000]


@pytest.mark.parametrize("rate_processor", ["fake_processor", "fake_processor_8k"])
def test_audio_start_and_end_cut_the_clip(
    tmp_path: Path, files: dict[str, Path], rate_processor: str, request: pytest.FixtureRequest
) -> None:
    processor = request.getfixturevalue(rate_processor)
    entry = {"audio": str(files["wav"]), "audio_start": 0.25, "audio_end": 0.75}
    out = processed(write(tmp_path, user("<audio>x"), audios=[entry]), processor)
    rate = processor.feature_extractor.sampling_rate
    assert [len(a) for a in out["call"]["audio"]] == [rate // 2]  # half a second of the one-second clip


@pytest.mark.parametrize(
    ("entry", "frames"),
    [
        pytest.param(lambda f: {"video": str(f["mp4"])}, 4, id="video-dict"),  # 8 frames at 4 fps, sampled at 2
        pytest.param(lambda f: "file://" + str(f["mp4"]), 4, id="file-uri-string"),
        pytest.param(lambda f: {"video": str(f["mp4"]), "fps": 4}, 8, id="video-dict-own-fps"),
        pytest.param(lambda f: {"video": str(f["mp4"]), "max_frames": 2}, 2, id="video-dict-max-frames"),
        pytest.param(lambda f: {"video": [str(f[f"frame{i}"]) for i in range(4)]}, 4, id="video-dict-frames"),
        pytest.param(lambda f: [str(f[f"frame{i}"]) for i in range(4)], 4, id="frame-list"),
    ],
)
def test_video_forms(tmp_path: Path, files: dict[str, Path], fake_processor: Any, entry: Any, frames: int) -> None:
    out = processed(write(tmp_path, user("<video>What happens?"), videos=[entry(files)]), fake_processor)
    assert [v.shape[0] for v in out["call"]["videos"]] == [frames]


def test_media_inside_the_prompt_content(tmp_path: Path, files: dict[str, Path], fake_processor: Any) -> None:
    """verl leaves list content as it is; Qwen's loaders read the parts (no media columns)."""
    prompt = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [
            {"type": "image", "image": str(files["png"])},
            {"type": "audio", "audio": str(files["wav"])},
            {"type": "text", "text": "What is shown and heard?"},
        ]},
    ]
    out = processed(write(tmp_path, prompt), fake_processor)
    assert out["call"]["images"][0].size == (WIDTH, HEIGHT)
    assert [len(a) for a in out["call"]["audio"]] == [16_000]
    assert out["call"]["text"] == ["system: Be brief.\nuser: <IMAGE> <AUDIO> What is shown and heard?\nassistant:"]
    assert out["item"]["raw_prompt"][1]["content"] == [
        {"type": "image", "image": str(files["png"])},
        {"type": "audio", "audio": str(files["wav"])},
        {"type": "text", "text": "What is shown and heard?"},
    ]


def test_raw_prompt_reads_back_to_the_same_media() -> None:
    """The verl engine's rollout decodes ``raw_prompt``'s media: settings travel with them."""
    raw = {
        "prompt": user("<image><audio><video>q"),
        "images": [{"image": "/p.png", "max_pixels": 4096}],
        "audios": [{"audio": "/a.wav", "audio_start": 1.0}],
        "videos": [{"video": ["/f0.png", "/f1.png"], "fps": 1.0}],
    }
    parsed = parse_row(raw, where="r")
    assert parsed.media[0] == MediaRef("image", path="/p.png", options=(("max_pixels", 4096),))
    assert media_in_messages(raw_prompt(parsed), where="r") == parsed.media


@pytest.mark.parametrize(
    ("images", "message"),
    [
        (["https://example.com/p.png"], r"images\[0\]: image 'https://example.com/p.png' is a remote URL"),
        ([{"image": "/p.png", "nframes": 4}], r"sets \['nframes'\], which omni-data does not honour"),
        ([{"image": "/p.png", "colour": "red"}], r"key\(s\) \['colour'\] omni-data does not know"),
        ([{"image": "/p.png", "max_pixels": "many"}], r"'max_pixels' must be a non-negative number, got 'many'"),
        ([{"image": 7}], r"a image entry must be .* \('image' holds int\)"),
        (["data:image/png;base64,@@@"], r"invalid base64"),
    ],
)
def test_unreadable_forms_are_refused_naming_the_row(images: list[Any], message: str) -> None:
    with pytest.raises(RowError, match=message) as caught:
        parse_row({"prompt": user("<image>x"), "images": images}, where="row 2 of f.parquet")
    assert caught.value.reason == "bad_media_column"
    assert str(caught.value).startswith("row 2 of f.parquet")


def test_video_bytes_are_refused_naming_the_row() -> None:
    with pytest.raises(RowError, match=r"r, videos\[0\]: a video entry .*inline video bytes are not read"):
        parse_row({"prompt": user("<video>x"), "videos": [{"bytes": b"mp4", "path": "v.mp4"}]}, where="r")


def test_audio_end_before_start_is_refused() -> None:
    with pytest.raises(RowError, match=r"audio_end \(0.5\) must be after audio_start \(1.0\)"):
        parse_row({"prompt": user("<audio>x"), "audios": [{"audio": "/a.wav", "audio_start": 1.0, "audio_end": 0.5}]},
                  where="r")


def test_a_bad_content_part_is_a_bad_prompt() -> None:
    prompt = [{"role": "user", "content": [{"type": "table", "rows": 3}]}]
    with pytest.raises(RowError, match=r"r, prompt\[0\], part 0: a content part must be") as caught:
        parse_row({"prompt": prompt}, where="r")
    assert caught.value.reason == "bad_prompt"
