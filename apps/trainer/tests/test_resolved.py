"""The run's files are read once per process, and again when one changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from omni_trainer.config import load_config
from omni_trainer.resolved import checkpoint, data_file, resolve_run


def test_a_checkpoint_is_read_once_and_again_after_it_changes(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["A"]}))
    first = checkpoint(str(tmp_path))
    assert first.config == {"architectures": ["A"]} and checkpoint(str(tmp_path)) is first
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Bee"]}))
    os.utime(tmp_path / "config.json", ns=(1, 1))
    assert checkpoint(str(tmp_path)).config == {"architectures": ["Bee"]}
    (tmp_path / "empty").mkdir()
    assert "has no config.json" in (checkpoint(str(tmp_path / "empty")).problem or "")
    assert (checkpoint(str(tmp_path / "missing")).problem or "").startswith("is not a directory")
    (tmp_path / "config.json").write_text("{not json")
    assert "cannot read" in (checkpoint(str(tmp_path)).problem or "")


def test_a_data_files_rows_and_sources_are_read_once(tmp_path: Path) -> None:
    from omni_data import rl_row, write_rl_parquet

    path = tmp_path / "train.parquet"
    rows = [rl_row(data_source=source, messages=[{"role": "user", "content": "hi"}], ground_truth="1",
                   ability="math", extra_info={"index": i})
            for i, source in enumerate (("openai/gsm8k", "openai/gsm8k", "mmk12"))]
    write_rl_parquet(rows, path)
    read = data_file(str(path))
    assert (read.rows, read.data_sources, read.problem) == (3, frozenset({"openai/gsm8k", "mmk12"}), None)
    assert data_file(str(path)) is read
    run = resolve_run(load_config([f"data.train_files=[{path}]", f"data.val_files=[{path}]"]))
    assert run.train_files == (read,) and run.data_sources == {"openai/gsm8k", "mmk12"} and run.model is None
    assert "does not exist" in (data_file(str(tmp_path / "nope.parquet")).problem or "")
