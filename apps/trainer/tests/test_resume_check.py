"""Resuming with other settings or data: the differences are listed and refused unless asked
for; the saved config is never overwritten silently; verl's resume_path on the local engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from omni_trainer.cli import main
from omni_trainer.config import Config, ConfigError, load_config, to_yaml
from omni_trainer.preflight import preflight
from omni_trainer.resume_check import DATA_FILE, data_fingerprint, record_run
from omni_trainer.run_dir import prepare_run_dir, run_identity
from omni_trainer.resolved import resolve_run


def fake_checkpoint(root: Path, step: int) -> Path:
    """The files omni_training.checkpoint.save_checkpoint writes for a LoRA actor (tiny)."""
    directory = root / f"step_{step:06d}"
    (directory / "adapter").mkdir(parents=True)
    save_file({"lora_A": torch.zeros(2, 2)}, directory / "adapter" / "adapter_model.safetensors")
    torch.save({"optimizer": {}, "scheduler": {}}, directory / "optim.pt")
    torch.save({"torch": torch.get_rng_state()}, directory / "rng.pt")
    (directory / "state.json").write_text(json.dumps({"step": step, "state": {}}))
    return directory


def saved_run(run: Path, config: Config, step: int = 4) -> Path:
    """What a local run leaves after saving ``step``: config.yaml, the data's fingerprint, a checkpoint."""
    run.mkdir(parents=True)
    record_run(run, config, data_fingerprint(config), step=0)
    checkpoint = fake_checkpoint(run / "checkpoints", step)
    (checkpoint / "state.json").write_text(json.dumps({"step": step, "state": {"identity": run_identity(config)}}))
    return checkpoint


def overrides(run: Path, *more: str) -> list[str]:
    return [f"trainer.default_local_dir={run}", *more]


def test_changed_settings_are_listed_and_refused_unless_asked_for(tmp_path: Path) -> None:
    """Before, the resumed run trained on with the new learning rate and rewrote config.yaml,
    so the run directory no longer said what its first steps were trained with."""
    run = tmp_path / "run"
    saved_run(run, load_config(overrides(run)))
    saved_config = (run / "config.yaml").read_text()
    changed = overrides(run, "actor_rollout_ref.actor.optim.lr=0.02", "algorithm.adv_estimator=rloo")
    with pytest.raises(ConfigError) as info:
        prepare_run_dir(load_config(changed))
    message = str(info.value)
    assert "resuming the run in" in message and "at step 4" in message
    assert "actor_rollout_ref.actor.optim.lr: 0.007 -> 0.02" in message  # embedded default: lr 0.007
    assert '"grpo" -> "rloo"' in message and "trainer.resume_anyway=true" in message
    assert (run / "config.yaml").read_text() == saved_config

    config = load_config([*changed, "trainer.resume_anyway=true"])
    start = prepare_run_dir(config)
    assert start.start_step == 4 and any("optim.lr: 0.007 -> 0.02" in note for note in start.notes), start.notes
    kept = record_run(run, config, data_fingerprint(config), step=start.start_step)
    assert kept == ["the earlier config.yaml is kept as config.before_step_4.yaml"]
    assert (run / "config.before_step_4.yaml").read_text() == saved_config
    assert (run / "config.yaml").read_text() == to_yaml(config)


def test_longer_training_and_other_logging_resume_and_are_shown(tmp_path: Path) -> None:
    run = tmp_path / "run"
    saved_run(run, load_config(overrides(run)))
    start = prepare_run_dir(load_config(overrides(run, "trainer.total_training_steps=90", "trainer.save_freq=5",
                                                  "trainer.log_val_generations=4")))
    assert start.start_step == 4
    assert "  trainer.total_training_steps: 60 -> 90" in start.notes and "  trainer.save_freq: 20 -> 5" in start.notes
    assert "  trainer.log_val_generations: 0 -> 4" in start.notes


def test_changed_training_data_is_refused_and_moved_data_is_not(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train = tmp_path / "train.parquet"
    train.write_bytes(b"rows of the first run")
    model = ["actor_rollout_ref.model.path=/models/m", "trainer.experiment_name=x"]
    saved_run(run, load_config(overrides(run, *model, f"data.train_files={train}")))

    moved = tmp_path / "elsewhere" / "train.parquet"
    moved.parent.mkdir()
    moved.write_bytes(train.read_bytes())
    assert prepare_run_dir(load_config(overrides(run, *model, f"data.train_files={moved}"))).start_step == 4

    train.write_bytes(b"rows edited in place")  # same path, other content
    with pytest.raises(ConfigError, match=r"data.train_files \(content\): .*train.parquet \(21 bytes, sha256 "):
        prepare_run_dir(load_config(overrides(run, *model, f"data.train_files={train}")))
    assert json.loads((run / DATA_FILE).read_text())["data.train_files"][0]["bytes"] == 21


def test_the_cli_shows_the_differences_and_exits_2_before_loading_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    saved_run(run, load_config(overrides(run)))
    assert main(overrides(run, "actor_rollout_ref.rollout.n=4")) == 2
    error = capsys.readouterr().err
    assert "actor_rollout_ref.rollout.n: 8 -> 4" in error and "Traceback" not in error
    assert (run / "config.yaml").read_text() == to_yaml(load_config(overrides(run)))


def test_resume_path_resumes_another_runs_checkpoint_against_that_runs_config(tmp_path: Path) -> None:
    """verl's trainer.resume_mode=resume_path, on the local engine: before, an unknown choice."""
    first, branch = tmp_path / "first", tmp_path / "branch"
    checkpoint = saved_run(first, load_config(overrides(first)), step=6)
    resume = ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={checkpoint}"]
    start = prepare_run_dir(load_config(overrides(branch, *resume)))
    assert start.resume_from == checkpoint and start.start_step == 6
    with pytest.raises(ConfigError, match=r"optim.lr: 0.007 -> 0.5"):  # compared with the first run's config
        prepare_run_dir(load_config(overrides(branch, *resume, "actor_rollout_ref.actor.optim.lr=0.5")))


def test_resume_path_refuses_to_overwrite_later_steps_and_names_a_bad_path(tmp_path: Path) -> None:
    run = tmp_path / "run"
    config = load_config(overrides(run))
    early = saved_run(run, config, step=2)
    fake_checkpoint(run / "checkpoints", 4)
    with pytest.raises(ConfigError, match=r"is step 2, but .* already holds later steps \(checkpoints step_000004\)"):
        prepare_run_dir(load_config(overrides(run, "trainer.resume_mode=resume_path",
                                              f"trainer.resume_from_path={early}")))
    assert (run / "checkpoints" / "step_000004").is_dir()
    with pytest.raises(ConfigError, match=r"resume_from_path=.*missing.*no such directory.*checkpoints/step_<N>"):
        prepare_run_dir(load_config(overrides(run, "trainer.resume_mode=resume_path",
                                              f"trainer.resume_from_path={tmp_path / 'missing'}")))


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        (["trainer.resume_mode=resume_path"], "trainer.resume_mode=resume_path needs trainer.resume_from_path"),
        (["trainer.resume_from_path=/runs/x/checkpoints/step_000002"],
         "is read only with trainer.resume_mode=resume_path"),
        (["reward.max_error_rate=1.5"], "reward.max_error_rate=1.5 must be in [0, 1]"),
    ],
)
def test_preflight_names_inconsistent_resume_and_reward_keys(settings: list[str], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        preflight(resolve_run(load_config(settings)))
    assert problem in str(info.value)
