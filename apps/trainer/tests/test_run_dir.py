"""How a run starts in its directory: resume, start over, refuse — decided before writing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from omni_trainer.config import ConfigError, derived_experiment_name, load_config
from omni_trainer.run_dir import prepare_run_dir, run_identity


def fake_checkpoint(root: Path, step: int) -> Path:
    """The layout omni_training.checkpoint.save_checkpoint writes for a LoRA actor."""
    directory = root / f"step_{step:06d}"
    (directory / "adapter").mkdir(parents=True)
    save_file({"lora_A": torch.randn(4, 8)}, directory / "adapter" / "adapter_model.safetensors")
    torch.save({"optimizer": {"state": {0: torch.randn(64)}}, "scheduler": {}}, directory / "optim.pt")
    torch.save({"torch": torch.get_rng_state()}, directory / "rng.pt")
    (directory / "state.json").write_text(json.dumps({"step": step, "state": {}}))
    return directory


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_resume_mode_disable_moves_the_earlier_run_aside(tmp_path: Path) -> None:
    run = tmp_path / "run"
    fake_checkpoint(run / "checkpoints", 2)
    (run / "config.yaml").write_text("old: run\n")
    start = prepare_run_dir(load_config([f"trainer.default_local_dir={run}", "trainer.resume_mode=disable"]))
    # Today the old step_000002 stayed and summary.txt named it as the new run's checkpoint.
    assert start.resume_from is None and start.start_step == 0
    # The directory stays (a running trainer holds its lock file there); its contents move.
    assert not any(run.iterdir()) and (tmp_path / "run.previous" / "checkpoints" / "step_000002").is_dir()
    assert start.notes == [f"trainer.resume_mode=disable: moved the earlier run in {run} to {tmp_path / 'run.previous'}"]
    fake_checkpoint(run / "checkpoints", 1)
    prepare_run_dir(load_config([f"trainer.default_local_dir={run}", "trainer.resume_mode=disable"]))
    assert (tmp_path / "run.previous.2" / "checkpoints" / "step_000001").is_dir()


def test_resume_mode_disable_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"is not empty and holds no earlier run \(notes.txt\)"):
        prepare_run_dir(load_config([f"trainer.default_local_dir={tmp_path}", "trainer.resume_mode=disable"]))
    assert (tmp_path / "notes.txt").exists()


def test_a_checkpoint_of_another_model_or_lora_shape_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    demo = load_config([f"trainer.default_local_dir={run}"])
    checkpoint = fake_checkpoint(run / "checkpoints", 20)
    (checkpoint / "state.json").write_text(json.dumps({"step": 20, "state": {"identity": run_identity(demo)}}))
    (run / "config.yaml").write_text("kept: true\n")
    real = load_config([f"trainer.default_local_dir={run}", f"actor_rollout_ref.model.path={tmp_path / 'model'}",
                        "actor_rollout_ref.model.lora_rank=32"])
    with pytest.raises(ConfigError) as info:
        prepare_run_dir(real)
    message = str(info.value)
    assert "step_000020 belongs to another run and cannot be resumed" in message
    assert "actor_rollout_ref.model.path: checkpoint None" in message and "lora_rank: checkpoint 16, this run 32" in message
    assert (run / "config.yaml").read_text() == "kept: true\n"  # nothing was overwritten
    assert prepare_run_dir(demo).start_step == 20


def test_checkpoints_saved_before_identities_are_checked_against_config_yaml(tmp_path: Path) -> None:
    run = tmp_path / "run"
    fake_checkpoint(run / "checkpoints", 4)
    (run / "config.yaml").write_text("actor_rollout_ref:\n  model:\n    path: null\n    lora_rank: 16\n")
    with pytest.raises(ConfigError, match=r"lora_rank: checkpoint 16, this run 8"):
        prepare_run_dir(load_config([f"trainer.default_local_dir={run}", "actor_rollout_ref.model.lora_rank=8"]))


def test_a_truncated_latest_checkpoint_falls_back_and_is_named(tmp_path: Path) -> None:
    run = tmp_path / "run"
    good = fake_checkpoint(run / "checkpoints", 2)
    broken = fake_checkpoint(run / "checkpoints", 4)
    truncate(broken / "optim.pt")
    (run / "checkpoints" / ".tmp-step_000006-99").mkdir()
    start = prepare_run_dir(load_config([f"trainer.default_local_dir={run}"]))
    assert start.resume_from == good and start.start_step == 2
    assert any(f"checkpoint {broken} cannot be resumed (optim.pt is truncated" in note
               and "set aside as step_000004.broken" in note for note in start.notes), start.notes
    assert any("deleted .tmp-step_000006-99" in note for note in start.notes)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000002", "step_000004.broken"]


def test_default_run_name_is_derived_from_model_and_data() -> None:
    # Today every run without trainer.experiment_name shared runs/tiny-default with the demo.
    demo = load_config([])
    a = load_config(["actor_rollout_ref.model.path=/models/Qwen3-Omni", "data.train_files=/d/gsm8k/train.parquet"])
    b = load_config(["actor_rollout_ref.model.path=/models/Qwen3-Omni", "data.train_files=/d/mmk12/train.parquet"])
    assert demo.trainer.default_local_dir == "runs/tiny-default"
    assert a.trainer.experiment_name is not None and a.trainer.experiment_name.startswith("Qwen3-Omni-gsm8k-train-")
    assert a.trainer.default_local_dir == f"runs/{a.trainer.experiment_name}"
    assert len({demo.trainer.experiment_name, a.trainer.experiment_name, b.trainer.experiment_name}) == 3
    assert derived_experiment_name(a) == a.trainer.experiment_name  # stable: a rerun finds its run
    named = load_config(["actor_rollout_ref.model.path=/m", "trainer.experiment_name=mine"])
    assert named.trainer.default_local_dir == "runs/mine"


def test_a_run_whose_every_checkpoint_is_unusable_is_refused_not_started_over(tmp_path: Path) -> None:
    """It used to set both aside and train from step 0 with exit 0, saying only that an earlier
    config.yaml was kept. Nothing is moved; resume_mode=disable is the way to start over."""
    run = tmp_path / "run"
    for step in (2, 4):
        truncate(fake_checkpoint(run / "checkpoints", step) / "optim.pt")
    with pytest.raises(ConfigError, match=r"no usable checkpoint in .*checkpoints:\n    step_000004: optim.pt is "
                                          r"truncated.*\n    step_000002: .*\n.*resume_mode=disable starts over"):
        prepare_run_dir(load_config([f"trainer.default_local_dir={run}"]))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000002", "step_000004"]
    start = prepare_run_dir(load_config([f"trainer.default_local_dir={run}", "trainer.resume_mode=disable"]))
    assert start.resume_from is None and (tmp_path / "run.previous" / "checkpoints" / "step_000004").is_dir()
