"""OmniVideo-R1 QI converter: annotation paths mapped through SOURCE=DEST, both
``audio_from_video`` settings, every drop reason, verl-omni 433f6a31's split, rows read back."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from omni_data import DatasetConfig, RLDataset, RowError, builtin
from omni_data.convert import omnivideo_qi as qi
from omni_data.errors import InputFormatError

LLAVA = "./data/LLaVA-Video-178K"
VISTA = "./data/VideoVista_Train"
MC_TYPE = "0_30_s_nextqa_mc_qa_processed"
MC_PROBLEM = "<video><audio>\nWhat happens?\nA. Nothing\nB. A door opens"


def write_clip(path: Path, *, seconds: float = 1.0, fps: int = 4, size: int = 32) -> Path:
    """An mp4 of frames brightening by 40 a frame and a 330 Hz tone (``omni_data.builtin.write_clip``:
    PyAV's bundled libav, no ffmpeg binary)."""
    rate = 16_000
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = [np.full((size, size, 3), (40 * i) % 256, dtype=np.uint8) for i in range(int(seconds * fps))]
    tone = (0.3 * np.sin(2 * np.pi * 330 * np.arange(int(seconds * rate)) / rate)).astype(np.float32)[None]
    return builtin.write_clip(path, frames, fps, tone, rate)


def rec(sample_id: str, video: str = f"{LLAVA}/clips/one.mp4", audio: str = "./data/audios/one.mp3",
        **overrides: Any) -> dict[str, Any]:
    base = {
        "id": sample_id,
        "Type": MC_TYPE,
        "problem": MC_PROBLEM,
        "solution": "B. A door opens",
        "videos": [video],
        "audios": [audio],
        "data_source": "0_30_s_nextqa",
    }
    base.update(overrides)
    return base


def layout(tmp_path: Path, media: Any) -> tuple[Path, list[qi.PathMap]]:
    """Media as downloaded (two datasets, extracted audio) and the annotation prefixes mapped."""
    llava, vista, audios = tmp_path / "llava", tmp_path / "vista", tmp_path / "audios"
    write_clip(llava / "clips" / "one.mp4")
    write_clip(llava / "clips" / "two.mp4", seconds=2.0)
    write_clip(vista / "v" / "three.mp4")
    write_clip(tmp_path / "special" / "one.mp4")  # the longer prefix's copy
    media.wav(audios / "one.mp3")  # a WAV under the annotation's name: only its path matters here
    maps = [
        qi.parse_path_map(f"{LLAVA}={llava}"),
        qi.parse_path_map(f"{VISTA}/={vista}"),  # a trailing "/" on SOURCE is dropped
        qi.parse_path_map(f"./data/audios={audios}"),
        qi.parse_path_map(f"{LLAVA}/special={tmp_path / 'special'}"),
    ]
    return tmp_path / "merged_train_all_qi.jsonl", maps


def records(tmp_path: Path) -> list[Any]:
    two, three = f"{LLAVA}/clips/two.mp4", f"{VISTA}/v/three.mp4"
    return [
        rec("mc"),  # 0: kept (multiple choice)
        rec("open", two, Type="0_30_s_activitynet_oe_qa", problem="<video>\nWhy?", solution=" Because. "),  # 1: kept
        rec("vista", three, problem="Describe the displayed video in detail.", Type="VideoVista"),  # 2: kept
        rec("", f"{LLAVA}/special/one.mp4"),  # 3: kept through the longer prefix; no id: the index
        rec("abs", str(tmp_path / "llava" / "clips" / "two.mp4")),  # 4: kept, an absolute path as it is
        "",  # 5: invalid_json (a blank line is a line)
        "{no json",  # 6: invalid_json
        [1, 2],  # 7: invalid_record
        rec("blank", problem="  "),  # 8: empty_problem
        rec("nosol", solution=" "),  # 9: empty_solution
        rec("twovideo", problem="<video><video>\nQ"),  # 10: invalid_video_placeholder
        rec("twopaths", videos=[f"{LLAVA}/clips/one.mp4", two]),  # 11: missing_video (not one path)
        rec("unmapped", "./data/Elsewhere/one.mp4"),  # 12: missing_video (no map)
        rec("gone", f"{LLAVA}/clips/gone.mp4"),  # 13: missing_video (mapped, no file)
        rec("prefix", f"{LLAVA}x/clips/one.mp4"),  # 14: missing_video ("LLaVA-Video-178Kx" is another prefix)
        rec("audio2", problem="<video><audio><aud<audio>io>\nQ"),  # 15: invalid_audio_placeholder, both ways
        rec("noaudio", audio="./data/audios/none.mp3"),  # 16: missing_audio without audio_from_video
        rec("audios2", audios=[]),  # 17: missing_audio without audio_from_video
    ]


def write_jsonl(path: Path, entries: list[Any]) -> None:
    path.write_text("\n".join(e if isinstance(e, str) else json.dumps(e) for e in entries) + "\n")


def read(out: Path, split: str) -> list[dict[str, Any]]:
    return pq.read_table(out / f"{split}.parquet").to_pylist()


@pytest.mark.parametrize("audio_from_video", [True, False])
def test_converts_with_every_drop_reason(tmp_path: Path, media: Any, audio_from_video: bool) -> None:
    source, maps = layout(tmp_path, media)
    write_jsonl(source, records(tmp_path))
    out = tmp_path / "out"
    report = qi.convert(source, out, maps, audio_from_video=audio_from_video, val_size=1, seed=3)
    drops = {"invalid_json": 2, "invalid_record": 1, "empty_problem": 1, "empty_solution": 1,
             "invalid_video_placeholder": 1, "missing_video": 4, "invalid_audio_placeholder": 1}
    if not audio_from_video:  # with audio_from_video the soundtrack comes with the video: kept
        drops["missing_audio"] = 2
    counts = report.splits[source.name]
    assert (dict(counts.dropped), counts.kept, counts.total) == (drops, 7 if audio_from_video else 5, 18)
    rows = {r["extra_info"]["id"]: r for split in ("train", "validation") for r in read(out, split)}
    one = str((tmp_path / "llava" / "clips" / "one.mp4").resolve())
    two = str((tmp_path / "llava" / "clips" / "two.mp4").resolve())
    audio = str((tmp_path / "audios" / "one.mp3").resolve())
    question = "<video>\nWhat happens?\nA. Nothing\nB. A door opens" if audio_from_video else MC_PROBLEM
    # verl-omni's build_rl_row for line 0 (but data_source: see the module docstring).
    expected_info: dict[str, Any] = {
        "id": "mc", "index": 0, "dataset": "OmniVideo-R1", "type": MC_TYPE,
        "question": "What happens?\nA. Nothing\nB. A door opens", "is_multiple_choice": True,
        "video_path": one, "original_video_path": f"{LLAVA}/clips/one.mp4",
        **({} if audio_from_video else {"audio_path": audio}),
        "original_data_source": "0_30_s_nextqa",
    }
    expected: dict[str, Any] = {
        "data_source": "omnivideo_r1_qi",
        "prompt": [
            {"role": "system", "content": qi.SYSTEM_PROMPT},
            {"role": "user", "content": f"{question}\n\n{qi.PROMPT_SUFFIX}"},
        ],
        "videos": [{"video": one, "fps": 2.0, "min_frames": 4, "max_frames": 64}],
        **({} if audio_from_video else {"audios": [audio]}),
        "ability": "omnivideo_qi",
        "reward_model": {"style": "rule", "ground_truth": "B. A door opens"},
        "extra_info": expected_info,
    }
    assert rows["mc"] == expected

    placeholders = "<video>" if audio_from_video else "<video><audio>"
    assert rows["open"]["prompt"][1]["content"].startswith(f"{placeholders}\nWhy?\n\n")
    assert rows["open"]["reward_model"]["ground_truth"] == "Because."
    assert rows["open"]["extra_info"]["is_multiple_choice"] is False
    assert rows["vista"]["prompt"][1]["content"].startswith(f"{placeholders}\nDescribe the displayed video")
    assert rows["vista"]["videos"][0]["video"] == str((tmp_path / "vista" / "v" / "three.mp4").resolve())
    assert rows["3"]["videos"][0]["video"] == str((tmp_path / "special" / "one.mp4").resolve())
    assert rows["abs"]["videos"][0]["video"] == two
    if audio_from_video:
        assert rows["noaudio"]["extra_info"]["index"] == 16 and "audios" not in rows["audios2"]


def expected_split(rows: list[dict[str, Any]], val_size: int, seed: int) -> tuple[list[str], list[str]]:
    """verl-omni's split, written out again, as ids in file order per side: videos sorted,
    shuffled once; walk them, adding whole videos to validation until the target is met."""
    videos: dict[str, list[str]] = {}
    for row in rows:
        videos.setdefault(row["extra_info"]["video_path"], []).append(row["extra_info"]["id"])
    walk = sorted(videos.keys())
    random.Random(seed).shuffle(walk)
    target = max(1, val_size)
    if target > len(rows) - 1:
        target = len(rows) - 1
    held: list[str] = []
    for video in walk:
        if held and sum(len(videos[v]) for v in held) >= target:
            break
        if len(videos[video]) != len(rows):
            held.append(video)
    train = [i for video in walk if video not in held for i in videos[video]]
    return train, [i for video in held for i in videos[video]]


@pytest.mark.parametrize(("val_size", "seed"), [(1, 42), (5, 42), (9, 0), (17, 7), (30, 5), (100, 1), (0, 3)])
def test_the_split_is_verl_omnis(tmp_path: Path, val_size: int, seed: int) -> None:
    media = tmp_path / "media"
    media.mkdir()
    rng = random.Random(11)
    entries = []
    for i in range(40):  # 40 rows over 13 videos, 1 to 8 rows each
        clip = f"c{min(int(rng.expovariate(0.3)), 12):02d}.mp4"
        (media / clip).write_bytes(b"only its existence is checked")
        entries.append(rec(f"r{i}", f"./data/v/{clip}"))
    source = tmp_path / "qi.jsonl"
    write_jsonl(source, entries)
    qi.convert(source, tmp_path / "all", [("./data/v", media)], val_size=1)  # every row, to read back
    everything = read(tmp_path / "all", "train") + read(tmp_path / "all", "validation")
    everything.sort(key=lambda r: r["extra_info"]["index"])
    if val_size < 1:
        with pytest.raises(ValueError, match="val_size must be >= 1"):
            qi.convert(source, tmp_path / "out", [("./data/v", media)], val_size=val_size, seed=seed)
        return
    train, validation = expected_split(everything, val_size, seed)
    if not train:  # a target near every row takes every video, as in verl-omni: refused
        with pytest.raises(InputFormatError, match="non-empty train and validation"):
            qi.convert(source, tmp_path / "out", [("./data/v", media)], val_size=val_size, seed=seed)
        return
    qi.convert(source, tmp_path / "out", [("./data/v", media)], val_size=val_size, seed=seed)
    assert [r["extra_info"]["id"] for r in read(tmp_path / "out", "validation")] == validation
    assert [r["extra_info"]["id"] for r in read(tmp_path / "out", "train")] == train
    assert len(validation) >= min(val_size, 39)


def test_max_samples_stops_reading(tmp_path: Path, media: Any) -> None:
    source, maps = layout(tmp_path, media)
    write_jsonl(source, records(tmp_path))
    report = qi.convert(source, tmp_path / "out", maps, max_samples=2)
    counts = report.splits[source.name]
    assert (counts.kept, counts.total) == (2, 2)
    assert counts.tallies["split"] == {"train": 1, "validation": 1}


def test_input_and_setting_problems_are_explained(tmp_path: Path, media: Any) -> None:
    source, maps = layout(tmp_path, media)
    write_jsonl(source, [rec("a"), rec("b")])  # two rows, one video: no split by video
    with pytest.raises(InputFormatError, match="non-empty train and validation sets of distinct videos"):
        qi.convert(source, tmp_path / "out", maps)
    write_jsonl(source, [rec("a"), rec("b", problem="")])
    with pytest.raises(InputFormatError, match="at least two kept QI rows"):
        qi.convert(source, tmp_path / "out", maps)
    with pytest.raises(InputFormatError, match="Cannot read"):
        qi.convert(tmp_path / "none.jsonl", tmp_path / "out", maps)
    with pytest.raises(ValueError, match="path map is required.*fps must be > 0.*max_frames must be >= 4.*max_samples"):
        qi.convert(source, tmp_path / "out", [], fps=0, max_frames=3, max_samples=-1)
    for bad in ("no-equals", "=/dest", "/=/dest", "src="):
        with pytest.raises(ValueError, match="SOURCE=DEST"):
            qi.parse_path_map(bad)
    assert qi.parse_path_map("./a/=~/x") == ("./a", Path("~/x").expanduser().resolve())
    assert qi.parse_path_map("s=a=b") == ("s", Path("a=b").resolve())


def omni_like(processor: Any) -> Any:
    """The fake processor with the token names ``use_audio_in_video`` counts soundtrack
    tokens by (none appear in its ids)."""
    processor.tokenizer = SimpleNamespace(convert_tokens_to_ids=lambda token: -1)
    processor.video_token, processor.audio_token = "<|video_pad|>", "<|audio_pad|>"
    return processor


@pytest.mark.parametrize("audio_from_video", [True, False])
def test_rows_read_back_as_written(tmp_path: Path, media: Any, fake_processor: Any, audio_from_video: bool) -> None:
    """Each row's video entry, min_frames included, is honoured as Qwen's loader honours it."""
    source, maps = layout(tmp_path, media)
    write_jsonl(source, records(tmp_path)[:5])
    qi.convert(source, tmp_path / "out", maps, audio_from_video=audio_from_video, val_size=1, seed=3)
    train = tmp_path / "out" / "train.parquet"
    dataset = RLDataset(train, omni_like(fake_processor),
                        DatasetConfig(use_audio_in_video=audio_from_video, max_prompt_length=4096))
    assert len(dataset) == pq.read_metadata(train).num_rows, dataset.report.format()
    fake_processor.calls.clear()
    item = dataset[0]
    [call] = fake_processor.calls
    assert [len(a) for a in call["audio"]] in ([16_000], [32_000])  # the soundtrack, or the extracted file
    assert [v.shape[0] for v in call["videos"]] == [4]  # at least min_frames 4 (2 fps would take fewer)
    assert item["extra_info"]["is_multiple_choice"] in (True, False)
