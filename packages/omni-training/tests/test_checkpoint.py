"""Checkpoint integrity before resuming: truncated files are found without loading them,
the newest complete checkpoint is chosen, staging directories of a crashed save go."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from omni_training.checkpoint import (
    checkpoint_problem,
    checkpoint_dirs,
    clean_staging,
    newest_complete_checkpoint,
    set_aside,
)


def fake_checkpoint(root: Path, step: int) -> Path:
    """The layout save_checkpoint writes for a LoRA actor, with small tensors."""
    directory = root / f"step_{step:06d}"
    (directory / "adapter").mkdir(parents=True)
    save_file({"lora_A": torch.randn(4, 8)}, directory / "adapter" / "adapter_model.safetensors")
    torch.save({"optimizer": {"state": {0: torch.randn(64)}}, "scheduler": {}}, directory / "optim.pt")
    torch.save({"torch": torch.get_rng_state()}, directory / "rng.pt")
    (directory / "state.json").write_text(json.dumps({"step": step, "state": {}}))
    return directory


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_a_complete_checkpoint_has_no_problem(tmp_path: Path) -> None:
    assert checkpoint_problem(fake_checkpoint(tmp_path, 1)) is None


def test_truncated_files_are_found_without_loading(tmp_path: Path) -> None:
    optim = fake_checkpoint(tmp_path, 1)
    truncate(optim / "optim.pt")
    assert "optim.pt is truncated or corrupt" in (checkpoint_problem(optim) or "")
    weights = fake_checkpoint(tmp_path, 2)
    truncate(weights / "adapter" / "adapter_model.safetensors")
    assert "adapter_model.safetensors is truncated" in (checkpoint_problem(weights) or "")
    missing = fake_checkpoint(tmp_path, 3)
    (missing / "rng.pt").unlink()
    assert checkpoint_problem(missing) == "missing rng.pt"


def test_newest_complete_checkpoint_skips_broken_newer_ones(tmp_path: Path) -> None:
    fake_checkpoint(tmp_path, 2)
    good = fake_checkpoint(tmp_path, 4)
    broken = fake_checkpoint(tmp_path, 6)
    truncate(broken / "optim.pt")
    newest, skipped = newest_complete_checkpoint(tmp_path)
    assert newest == good
    assert [path for path, _ in skipped] == [broken]
    moved = set_aside(broken)
    assert moved.name == "step_000006.broken" and moved.is_dir()
    assert checkpoint_dirs(tmp_path)[-1] == good  # no longer counted as a checkpoint


def test_clean_staging_removes_leftovers_of_a_crashed_save(tmp_path: Path) -> None:
    fake_checkpoint(tmp_path, 1)
    (tmp_path / ".tmp-step_000002-1234" / "adapter").mkdir(parents=True)
    assert [p.name for p in clean_staging(tmp_path)] == [".tmp-step_000002-1234"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000001"]
