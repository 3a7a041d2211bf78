"""``trainer convert`` reads the AVQA_R1 release layout and writes verl-omni's rows; the
flags for deliberate differences reach the converter."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import soundfile as sf  # type: ignore[import-untyped]
from PIL import Image

from omni_data.convert import avqa
from omni_trainer.cli import main


def write_release(root: Path) -> None:
    split_dir = root / "train"
    (split_dir / "images").mkdir(parents=True)
    (split_dir / "audios").mkdir()
    Image.new("RGB", (32, 32), (200, 10, 10)).save(split_dir / "images" / "0.jpg")
    sf.write(split_dir / "audios" / "0.wav", np.zeros(1600, dtype=np.float32), 16_000)
    record = {
        "problem_id": 3, "problem": "What sounds?", "data_type": "image_audio", "problem_type": "which",
        "options": ["A. bell", "B. dog"], "solution": "<answer>b</answer>",
        "path": {"image": "images/0.jpg", "audio": "audios/0.wav"},
    }
    (split_dir / "omni_rl_format_train.json").write_text(json.dumps([record]))


def test_trainer_convert_avqa_release(tmp_path: Path) -> None:
    write_release(tmp_path / "AVQA_R1")
    assert main(["convert", "avqa", "--input", str(tmp_path / "AVQA_R1"), "--output-dir", str(tmp_path / "out")]) == 0
    [row] = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert row["prompt"] == [
        {"role": "system", "content": avqa.SYSTEM_PROMPT},
        {"role": "user", "content": "<image><audio>What sounds?\nOptions:\nA. bell\nB. dog"},
    ]
    assert row["images"] == [{"image": str((tmp_path / "AVQA_R1" / "train" / "images" / "0.jpg").resolve())}]
    assert row["reward_model"]["ground_truth"] == "<answer>b</answer>"  # as written

    argv = ["convert", "avqa", "--input", str(tmp_path / "AVQA_R1"), "--output-dir", str(tmp_path / "norm"),
            "--normalize-labels", "--strict-split"]
    assert main(argv) == 0
    [row] = pq.read_table(tmp_path / "norm" / "train.parquet").to_pylist()
    assert row["reward_model"]["ground_truth"] == "<answer>B</answer>"
