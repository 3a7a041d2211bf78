"""Bad input files get an error that names the file and the place, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omni_data.convert.avqa import read_split
from omni_data.convert.sources import read_records
from omni_data.errors import InputFormatError, MediaError
from omni_data.media import MediaSettings, decode
from omni_data.rows import MediaRef


def test_non_utf8_jsonl_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    path.write_bytes(json.dumps({"question": "a", "answer": "#### 1"}).encode() + b"\n" + b'{"question": "caf\xe9"}\n')
    with pytest.raises(InputFormatError, match=r"train\.jsonl:2 is not UTF-8 text \(byte 0xe9 at column 18\)"):
        list(read_records([path]))


def test_non_utf8_avqa_split_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "train.json"
    path.write_bytes(b'[\n {"problem": "ok"},\n {"problem": "\xff"}\n]\n')
    with pytest.raises(InputFormatError, match=r"train\.json:3 is not UTF-8"):
        read_split(path)


@pytest.mark.parametrize("rate", [16_000, 8_000])  # Qwen's loader path; our resampling path
def test_corrupt_media_error_always_has_a_reason(tmp_path: Path, rate: int) -> None:
    path = tmp_path / "tone.wav"
    path.write_bytes(b"RIFF\x00\x00\x00\x00WAVE")  # a header and nothing else
    with pytest.raises(MediaError) as caught:
        decode(MediaRef("audio", path=str(path)), MediaSettings(sampling_rate=rate), where="row 3 of x.parquet")
    message = str(caught.value)
    assert message.startswith("row 3 of x.parquet: cannot decode audio (file ") and str(path) in message
    reason = message.split("): ", 1)[1]
    assert reason.strip(), message  # never "...: " with nothing after it
