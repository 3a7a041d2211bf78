from __future__ import annotations

from pathlib import Path

import pytest

from omni_trainer.loggers import build_sinks


def test_tensorboard_writes_event_files(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    (sink,) = build_sinks(["console", "tensorboard"], tmp_path, project="p", experiment="e", config={})
    sink.log(1, {"critic/score/mean": 0.5, "step": 1.0, "training/rollout_actor_probs_pearson_corr": float("nan")})
    sink.close()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_unknown_logger_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"Unknown trainer.logger \['mlflow'\]; valid: console, tensorboard, wandb"):
        build_sinks(["console", "mlflow"], tmp_path, project="p", experiment="e", config={})


def test_unconfigured_wandb_is_skipped_loudly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert build_sinks(["wandb"], tmp_path, project="p", experiment="e", config={}) == []
    assert "wandb logger skipped: not configured" in capsys.readouterr().out
