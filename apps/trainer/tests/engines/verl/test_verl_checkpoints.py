"""The verl engine's checkpoints, checked before Ray starts: a damaged newest step falls back
to the one before (as the local engine does), a run with no usable checkpoint is refused
rather than silently started over, and ``resume_mode=resume_path`` never overwrites the later
steps of the directory it resumes into.

The checkpoints are verl's layout (``global_step_<N>/actor/<kind>_world_size_<W>_rank_<R>.pt``,
``data.pt``, ``latest_checkpointed_iteration.txt``) written with ``torch.save`` as verl does;
the whole-command tests run ``trainer`` in-process with ``ray.init`` made to fail, so a
refusal that came from Ray or a worker would show."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch

from omni_trainer.config import ConfigError, load_config

if importlib.util.find_spec("verl") is None:  # pragma: no cover
    pytest.skip("needs the distributed extra (uv sync --extra distributed)", allow_module_level=True)

from omni_trainer.engines.verl.checkpoints import TRACKER, auto_resume_point, checkpoint_problem  # noqa: E402
from omni_trainer.engines.verl.launch import record_start  # noqa: E402

KINDS = ("model", "optim", "extra_state")


def save_step(run: Path, step: int, world_size: int = 2) -> Path:
    """verl's files of one saved step (tiny tensors), and the tracker naming it."""
    folder = run / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    for kind in KINDS:
        for rank in range(world_size):
            torch.save({"w": torch.full((256,), float(step))}, folder / "actor" / f"{kind}_world_size_{world_size}_rank_{rank}.pt")
    torch.save({"epoch": 0}, folder / "data.pt")
    (run / TRACKER).write_text(str(step))
    return folder


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def verl_config(tmp_path: Path, *extra: str) -> object:
    train = tmp_path / "train.parquet"
    train.write_bytes(b"rows")
    return load_config(["trainer.engine=verl", "actor_rollout_ref.model.path=/models/m", f"data.train_files={train}",
                        "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
                        f"trainer.default_local_dir={tmp_path / 'run'}", *extra])


def test_each_shard_and_the_dataloader_state_are_checked(tmp_path: Path) -> None:
    run = tmp_path / "run"
    folder = save_step(run, 3)
    assert checkpoint_problem(folder) is None
    (folder / "actor" / "optim_world_size_2_rank_1.pt").unlink()
    assert checkpoint_problem(folder) == "actor/ lacks optim_world_size_2_rank_1.pt"
    other = save_step(run, 4)
    truncate(other / "data.pt")
    assert "data.pt is truncated or corrupt" in str(checkpoint_problem(other))
    empty = run / "global_step_5"
    empty.mkdir()
    assert checkpoint_problem(empty) == "no actor shards (model_world_size_<W>_rank_<R>.pt)"


def test_a_truncated_shard_of_the_newest_step_falls_back_to_the_step_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reported case: one rank's model shard of the newest step cut short. verl would fail
    every rerun on the workers with a PytorchStreamReader traceback (the tracker names that step)."""
    run = tmp_path / "run"
    save_step(run, 5)
    newest = save_step(run, 6)
    truncate(newest / "actor" / "model_world_size_2_rank_1.pt")
    assert record_start(verl_config(tmp_path), run) == 5
    out = capsys.readouterr().out
    assert f"checkpoint {newest} cannot be resumed (actor/model_world_size_2_rank_1.pt is truncated" in out
    assert "set aside as global_step_6.broken" in out
    assert f"{TRACKER} named step 6; resuming from global_step_5" in out
    assert (run / TRACKER).read_text() == "5"  # what verl's _load_checkpoint reads
    assert not newest.exists() and (run / "global_step_6.broken" / "actor").is_dir()  # kept for inspection


def test_a_save_past_the_tracker_or_a_tracked_step_that_is_gone_falls_back(tmp_path: Path) -> None:
    run = tmp_path / "run"
    save_step(run, 2)
    save_step(run, 4)
    (run / TRACKER).write_text("2")  # step 4's save never finished: verl writes the tracker last
    point = auto_resume_point(run)
    assert point.step == 2 and (run / "global_step_4.broken").is_dir()
    assert "saved after the last finished checkpoint (step 2)" in point.notes[0]
    (run / TRACKER).write_text("9")  # names a step that is not there: verl would train from scratch
    point = auto_resume_point(run)
    assert point.step == 2 and (run / TRACKER).read_text() == "2"
    assert point.notes == [f"{TRACKER} named step 9; resuming from global_step_2, the newest usable checkpoint"]


def test_a_run_with_no_usable_checkpoint_is_refused_and_nothing_moved(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for step in (1, 2):
        truncate(save_step(run, step) / "actor" / "model_world_size_2_rank_0.pt")
    with pytest.raises(ConfigError, match=r"no usable checkpoint in .*run:\n    global_step_2: actor/model_world_size_2"
                                          r"_rank_0.pt is truncated.*\n    global_step_1: .*\n.*resume_mode=disable starts over"):
        record_start(verl_config(tmp_path), run)
    assert sorted(p.name for p in run.iterdir()) == ["global_step_1", "global_step_2", TRACKER]
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / TRACKER).write_text("3")
    with pytest.raises(ConfigError, match="names step 3, but .* holds no global_step_<N> folder"):
        auto_resume_point(tmp_path / "bare")


def test_resume_path_into_a_run_with_later_steps_is_refused_and_they_are_kept(tmp_path: Path) -> None:
    """The reported data loss: resuming step 4 into the run that holds steps 5 and 6 retrained
    them over the saved ones and replaced their metrics."""
    run = tmp_path / "run"
    for step in (4, 5, 6):
        save_step(run, step)
    metrics = "".join(json.dumps({"step": step, "actor/pg_loss": 0.1}) + "\n" for step in range(1, 7))
    (run / "metrics.jsonl").write_text(metrics)
    config = verl_config(tmp_path, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={run / 'global_step_4'}")
    with pytest.raises(ConfigError, match=r"global_step_4 is step 4, but .*run already holds later steps "
                                          r"\(checkpoints global_step_5, global_step_6; metrics to step 6\); resuming "
                                          r"there would overwrite them"):
        record_start(config, run)
    assert (run / "metrics.jsonl").read_text() == metrics
    assert all((run / f"global_step_{step}" / "actor").is_dir() for step in (5, 6))
    # Into a new directory it resumes (verl reads the checkpoint, writes the new run's steps).
    elsewhere = verl_config(tmp_path, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={run / 'global_step_4'}",
                            f"trainer.default_local_dir={tmp_path / 'branch'}")
    (tmp_path / "branch").mkdir()
    assert record_start(elsewhere, tmp_path / "branch") == 4


def test_resume_path_to_a_damaged_step_is_refused_naming_the_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    folder = save_step(run, 4)
    (folder / "actor" / "extra_state_world_size_2_rank_0.pt").unlink()
    config = verl_config(tmp_path, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={folder}",
                         f"trainer.default_local_dir={tmp_path / 'branch'}")
    (tmp_path / "branch").mkdir()
    with pytest.raises(ConfigError, match=r"global_step_4 cannot be resumed \(actor/ lacks extra_state_world_size_2_rank_0.pt\)"):
        record_start(config, tmp_path / "branch")


def test_the_trainer_command_refuses_before_ray_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``uv run trainer trainer.engine=verl trainer.device=cpu trainer.resume_mode=resume_path
    trainer.resume_from_path=<run>/global_step_4`` on the embedded default, in-process: exit 2
    with the message, and Ray never asked to start."""
    import ray

    from omni_trainer.cli import main

    def no_ray(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("ray.init was called: the refusal came too late")

    monkeypatch.setattr(ray, "init", no_ray)
    monkeypatch.setenv("OMNI_RL_CACHE", os.environ.get("OMNI_RL_CACHE", str(tmp_path / "cache")))
    run = tmp_path / "run"
    for step in (4, 5):
        save_step(run, step, world_size=1)
    code = main(["trainer.engine=verl", "trainer.device=cpu", f"trainer.default_local_dir={run}",
                 "trainer.resume_mode=resume_path", f"trainer.resume_from_path={run / 'global_step_4'}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "already holds later steps (checkpoints global_step_5)" in err
    assert (run / "global_step_5" / "actor").is_dir()


def test_a_save_that_runs_out_of_disk_in_a_worker_says_so(tmp_path: Path) -> None:
    """verl's workers fail a save on a full disk with torch's "PytorchStreamWriter failed
    writing file" inside a Ray traceback; the run stops with the space it lacks (exit 2)."""
    from omni_trainer.engines.verl.launch import checkpoint_space_error
    from omni_training.checkpoint import CheckpointSpaceError

    run = tmp_path / "run"
    folder = save_step(run, 2)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    traceback = RuntimeError("ray::WorkerDict.actor_rollout_save_checkpoint() ...\nRuntimeError: [enforce fail at "
                             "inline_container.cc:664] . unexpected pos 128 vs 0\nPytorchStreamWriter failed writing file "
                             "data/3: file write failed")
    error = checkpoint_space_error(traceback, run)
    assert isinstance(error, CheckpointSpaceError)
    assert str(error).startswith(f"no space left on {run}: ")
    assert f"MB free, a checkpoint needs about {size / 2**20:.0f} MB (the size of global_step_2); the save failed " \
           "(global_step_2 is intact)" in str(error)
    assert checkpoint_space_error(RuntimeError("CUDA out of memory"), run) is None
