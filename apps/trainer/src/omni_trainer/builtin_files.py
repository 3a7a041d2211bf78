"""The built-in task as RL parquet files, for engines that read data from files (verl).

The local engine trains the embedded default on :func:`omni_trainer.builtin_task.builtin_rows`
in memory; verl's dataloader reads parquet. These are the same rows (same seeds: the
training rows from ``data.seed``, the validation rows from ``data.seed + 1``) in omni-data's
RL row format: the picture as PNG bytes, the tone as a 16 kHz WAV file beside the parquet,
the question after ``<image><audio>``, so both engines template the same prompt.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

from omni_trainer import builtin_task
from omni_trainer.builtin_preference import builtin_preference_files
from omni_trainer.embedded_model import EMBEDDED_MODEL, embedded_model_path
from omni_trainer.tasks import PREFERENCE, task_name

BUILTIN_VALIDATION_ROWS = 16
"""Validation rows of the built-in task (the local engine validates on as many)."""
TRAIN_FILE = "train.parquet"
VAL_FILE = "val.parquet"


def write_builtin_task(out_dir: Path, *, train_rows: int, val_rows: int, seed: int) -> tuple[Path, Path]:
    """``(train, val)`` parquet paths under ``out_dir``, written once per size and seed."""
    out_dir = Path(out_dir) / f"builtin-task-{train_rows}-{val_rows}-seed{seed}"
    train, val = out_dir / TRAIN_FILE, out_dir / VAL_FILE
    if not (train.is_file() and val.is_file()):
        _write(builtin_task.builtin_rows(train_rows, seed=seed), out_dir / "train-media", train, split="train")
        _write(builtin_task.builtin_rows(val_rows, seed=seed + 1), out_dir / "val-media", val, split="val")
    return train, val


def _write(rows: list[dict[str, Any]], media_dir: Path, path: Path, *, split: str) -> None:
    import soundfile as sf  # type: ignore[import-untyped]

    from omni_data.schema import rl_row, write_rl_parquet

    media_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for row in rows:
        (message,) = row["messages"]
        question = next(part["text"] for part in message["content"] if part["type"] == "text")
        png = io.BytesIO()
        row["images"][0].save(png, format="PNG")
        tone = media_dir / f"tone-{row['index']}.wav"
        sf.write(tone, row["audios"][0], 16_000)
        written.append(rl_row(
            data_source=row["data_source"], messages=[{"role": "user", "content": f"<image><audio>{question}"}],
            ground_truth=row["ground_truth"], ability="digits", extra_info={"split": split, "index": row["index"]},
            images=[{"bytes": png.getvalue(), "path": f"picture-{row['index']}.png"}], audios=[str(tone)],
        ))
    tmp = path.with_suffix(".tmp")
    write_rl_parquet(written, tmp)
    tmp.replace(path)


def use_builtin_files(config: Any) -> bool:
    """For an engine that reads files: give the embedded default (no model path, no train
    files) the tiny Qwen3-Omni's cached build and the built-in task's files. Returns whether
    it did; ``config`` is changed in place before the pre-flight checks it."""
    model, data = config.actor_rollout_ref.model, config.data
    if model.path is not None or data.train_files is not None or model.stage != "thinker":
        return False
    from omni_model_kit.tiny import default_cache_dir

    model.path = embedded_model_path()
    if task_name(config) == PREFERENCE:  # the built-in pairs, as the local engine trains on
        data.train_files, data.val_files = builtin_preference_files(config)
        task = "built-in preference pairs"
    else:
        train, val = write_builtin_task(
            default_cache_dir(), train_rows=data.builtin_task_size, val_rows=BUILTIN_VALIDATION_ROWS, seed=data.seed
        )
        data.train_files, data.val_files = [str(train)], [str(val)]
        task = "built-in task"
    print(f"model: {EMBEDDED_MODEL} built offline at {model.path}; {task}: "
          f"{Path(data.train_files[0]).parent}", file=sys.stderr)
    return True
