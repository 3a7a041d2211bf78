"""A run whose policy updates are skipped step after step (a non-finite gradient norm) stops
with exit 2 and its cause, on both engines. It used to train on, writing checkpoints that
learned nothing, and exit 0 (the reported case: rollout_is_threshold=nan, now refused as a
config value; a NaN can still come from the data or a bf16 overflow)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from omni_training.run_guards import SkippedUpdateWatch, UpdatesSkippedError, step_was_skipped


def test_three_skipped_steps_in_a_row_stop_and_one_finite_step_resets_the_count() -> None:
    watch = SkippedUpdateWatch()
    nan = {"actor/grad_norm": math.nan, "actor/pg_loss": math.nan}
    watch.observe(1, nan)
    watch.observe(2, nan)
    watch.observe(3, {"actor/grad_norm": 0.5})  # a spike, then learning again
    watch.observe(4, nan)
    watch.observe(5, {"actor/grad_norm": math.inf})
    with pytest.raises(UpdatesSkippedError, match=r"(?s)steps 4-6: the policy update was skipped on each .*actor/grad_norm=nan, "
                                                  r"actor/pg_loss=nan\), so the weights have not changed since step 3.*"
                                                  r"newest checkpoint in /runs/x"):
        watch.observe(6, nan, run_dir="/runs/x")
    # the local engine's share of skipped updates: a step is skipped when all were
    assert step_was_skipped({"actor/skipped_step": 1.0, "actor/grad_norm": math.nan})
    assert not step_was_skipped({"actor/skipped_step": 0.5, "actor/grad_norm": math.nan})


def test_a_local_run_whose_every_update_is_skipped_stops_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from omni_trainer.cli import main

    def nan_norm(*_args: Any, **_kwargs: Any) -> torch.Tensor:
        return torch.tensor(math.nan)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", nan_norm)
    run = tmp_path / "run"
    code = main(["trainer.total_training_steps=6", "trainer.val_before_train=false", "trainer.test_freq=0",
                 f"trainer.default_local_dir={run}"])
    captured = capsys.readouterr()
    assert code == 2, captured.err[-3000:]
    assert "steps 1-3: the policy update was skipped on each" in captured.err
    lines = [line for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert len(lines) == 3  # it stopped after the third step, not after six


@pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="needs the distributed extra")
def test_the_verl_trainer_stops_on_skipped_updates_and_at_a_requested_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our ``omni_sync`` trainer around verl's sync trainer's ``step`` (verl's own step replaced
    by one that reports a NaN gradient norm, as its ``_update_actor`` does after a skipped update)."""
    from types import SimpleNamespace

    from verl.trainer.ppo.v1.trainer_base import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from omni_verl.settings import TRAINER_MODE
    from omni_verl.stop import stop_file
    from omni_verl.trainer import OmniSyncTrainer

    assert get_trainer_cls(TRAINER_MODE) is OmniSyncTrainer  # registered with verl's registry

    def skipped_step(self: Any, metrics: dict[str, Any], timing_raw: dict[str, Any]) -> str:
        metrics["actor/grad_norm"] = math.nan
        return "batch"

    saved: list[int] = []
    monkeypatch.setattr(PPOTrainerSync, "step", skipped_step)
    monkeypatch.setattr(PPOTrainerSync, "on_step_end", lambda self: None)  # the rollout's weight update
    monkeypatch.setattr(OmniSyncTrainer, "_save_checkpoint", lambda self: saved.append(self.global_steps))
    trainer = object.__new__(OmniSyncTrainer)
    trainer.config = SimpleNamespace(trainer=SimpleNamespace(default_local_dir=str(tmp_path), save_freq=5))
    trainer.total_training_steps = 10
    for step in (1, 2):
        trainer.global_steps = step
        assert trainer.step({}, {}) == "batch"
    trainer.global_steps = 3
    with pytest.raises(UpdatesSkippedError, match="steps 1-3"):
        trainer.step({}, {})

    trainer.on_step_end()
    assert trainer.total_training_steps == 10 and saved == []  # no stop asked
    stop_file(tmp_path).touch()
    trainer.on_step_end()  # step 3: verl saved none (save_freq=5), ours saves; the loop ends after it
    assert saved == [3] and trainer.total_training_steps == 3
    trainer.global_steps = 5
    trainer.on_step_end()  # verl's own save of step 5 stands
    assert saved == [3] and trainer.total_training_steps == 5
