from __future__ import annotations

from typing import Any

import pytest

from omni_data.errors import RowError
from omni_data.rows import MediaRef, parse_row, raw_prompt


def row(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "data_source": "d",
        "prompt": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "<image>What <audio>? <image>"}],
        "images": ["/a.png", {"bytes": b"xyz", "path": "b.png"}],
        "audios": ["/c.wav"],
        "videos": None,
        "reward_model": {"style": "rule", "ground_truth": "1"},
        "extra_info": {"index": 3},
    }
    base.update(overrides)
    return base


def test_placeholders_pair_with_media_in_order() -> None:
    parsed = parse_row(row(), where="row 0 of f.parquet")
    assert parsed.messages[0] == {"role": "system", "content": "be brief"}
    parts = parsed.messages[1]["content"]
    assert [p["type"] for p in parts] == ["image", "text", "audio", "text", "image"]
    assert parts[0]["image"] == MediaRef("image", path="/a.png")
    assert parts[4]["image"] == MediaRef("image", path="b.png", data=b"xyz")
    assert [m.kind for m in parsed.media] == ["image", "audio", "image"]
    assert set(parsed.fields) == {"data_source", "reward_model", "extra_info"}
    shown = raw_prompt(parsed)[1]["content"]
    assert shown[0] == {"type": "image", "image": "/a.png"}
    assert shown[4] == {"type": "image", "image": {"bytes": b"xyz", "path": "b.png"}}


def test_video_as_frame_list() -> None:
    parsed = parse_row(row(prompt=[{"role": "user", "content": "<video>hi"}], images=None, audios=None,
                           videos=[["/f0.png", "/f1.png"]]), where="r")
    [video] = parsed.media
    assert video.frames == (MediaRef("image", path="/f0.png"), MediaRef("image", path="/f1.png"))


@pytest.mark.parametrize(
    ("overrides", "reason", "message"),
    [
        ({"prompt": "just a string"}, "bad_prompt", r"row 5 of f.parquet: column 'prompt' must be a non-empty list"),
        ({"prompt": [{"role": "user", "content": 3}]}, "bad_prompt", "must be a non-empty list"),
        ({"images": "/a.png"}, "bad_media_column", r"column 'images' must be a list, got str"),
        ({"audios": [42]}, "bad_media_column", r"row 5 of f.parquet, audios\[0\]: a audio entry must be a path"),
        ({"images": [{"bytes": None, "path": None}]}, "bad_media_column", r"images\[0\]"),
        ({"images": ["/a.png"]}, "media_count_mismatch", r"more <image> placeholders than 'images' entries \(1\)"),
        ({"audios": ["/c.wav", "/d.wav"]}, "media_count_mismatch", r"\{'audios': 1\} media entries have no placeholder"),
    ],
)
def test_malformed_rows_name_the_row_and_reason(overrides: dict[str, Any], reason: str, message: str) -> None:
    with pytest.raises(RowError, match=message) as info:
        parse_row(row(**overrides), where="row 5 of f.parquet")
    assert info.value.reason == reason
