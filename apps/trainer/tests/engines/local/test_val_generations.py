"""``trainer.log_val_generations``: verl's choice of samples, the run directory's files, the loggers."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

from omni_trainer.config import ConfigError, load_config
from omni_trainer.loggers import Generation
from omni_trainer.preflight import preflight
from omni_trainer.engines.local.val_generations import ValGeneration, ValGenerationsLog, choose
from omni_trainer.resolved import resolve_run


def generations(count: int) -> list[ValGeneration]:
    """``count`` samples over fewer prompts (two responses each), out of prompt order, so the
    sort, its stability and the shuffle all matter."""
    return [
        ValGeneration(f"prompt {(7 * i // 2) % count:02d}", f"answer {i}", i / count, str(i), "src", "ok")
        for i in range(count)
    ]


class RecordingSink:
    def __init__(self) -> None:
        self.generations: list[tuple[int, list[Generation]]] = []

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        pass

    def log_generations(self, step: int, samples: Sequence[Generation]) -> None:
        self.generations.append((step, list(samples)))

    def close(self) -> None:
        pass


@pytest.mark.slow
def test_the_samples_chosen_are_verls() -> None:
    """verl's own ``_maybe_log_val_generations`` on the same samples logs the same ones, in order."""
    pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed --extra gpu)")
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    samples = generations(20)
    logged: list[tuple[str, str, float]] = []
    verl_trainer = SimpleNamespace(
        config=SimpleNamespace(trainer=SimpleNamespace(log_val_generations=6, logger=["console"])),
        validation_generations_logger=SimpleNamespace(log=lambda loggers, chosen, step: logged.extend(chosen)),
        global_steps=3,
    )
    RayPPOTrainer._maybe_log_val_generations(
        verl_trainer,  # type: ignore[arg-type]  # the method reads these three attributes
        inputs=[s.input for s in samples], outputs=[s.output for s in samples], scores=[s.score for s in samples],
    )
    ours = [(s.input, s.output, s.score) for s in choose(samples, 6)]
    assert len(logged) == 6 and ours == [tuple(sample) for sample in logged]


def test_each_validation_picks_the_same_prompts_and_fewer_samples_than_asked_are_all() -> None:
    samples = generations(20)
    assert [s.input for s in choose(samples, 5)] == [s.input for s in choose(list(reversed(samples)), 5)]
    assert sorted(choose(samples, 50), key=lambda s: s.output) == sorted(samples, key=lambda s: s.output)


def test_each_validation_is_a_file_of_the_chosen_samples_and_goes_to_the_sinks(tmp_path: Path) -> None:
    sink = RecordingSink()
    log = ValGenerationsLog(tmp_path / "val_generations", 3, [sink], resume_after=None)
    samples = generations(8)
    path = log.log(0, samples)
    assert path == tmp_path / "val_generations" / "step_0.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    expected = [{"input": s.input, "output": s.output, "score": s.score, "gts": s.gts, "data_source": "src",
                 "status": "ok", "step": 0} for s in choose(samples, 3)]
    assert rows == expected
    assert sink.generations == [(0, [(s.input, s.output, s.score) for s in choose(samples, 3)])]


def test_a_resumed_run_drops_the_files_past_its_checkpoint_and_a_new_one_all(tmp_path: Path) -> None:
    directory = tmp_path / "val_generations"
    for step in (0, 2, 4):
        ValGenerationsLog(directory, 2, [], resume_after=step).log(step, generations(4))
    ValGenerationsLog(directory, 2, [], resume_after=2)
    assert sorted(p.name for p in directory.iterdir()) == ["step_0.jsonl", "step_2.jsonl"]
    ValGenerationsLog(directory, 2, [], resume_after=None)
    assert list(directory.iterdir()) == []


@pytest.mark.slow
def test_tensorboard_gets_verls_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our TensorBoard sink writes ``val/generations`` as verl's ValidationGenerationsLogger does."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed --extra gpu)")
    from verl.utils.tracking import ValidationGenerationsLogger

    from omni_trainer.loggers import build_sinks

    table = [("a prompt", "an answer", 1.0), ("another", "", 0.0)]
    (sink,) = build_sinks(["tensorboard"], tmp_path / "ours", project="p", experiment="e", config={})
    sink.log_generations(4, table)
    sink.close()
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "verl"))
    verl_logger = ValidationGenerationsLogger()
    verl_logger.log(["tensorboard"], table, 4)
    verl_logger.writer.close()
    assert tensorboard_texts(tmp_path / "ours" / "tensorboard") == tensorboard_texts(tmp_path / "verl")
    assert "**Output:** an answer" in tensorboard_texts(tmp_path / "verl")[0][2]


def tensorboard_texts(directory: Path) -> list[tuple[str, int, str]]:
    from tensorboard.backend.event_processing.event_accumulator import (  # type: ignore[import-untyped]
        TENSORS,
        EventAccumulator,
    )

    events = EventAccumulator(str(directory), size_guidance={TENSORS: 0})
    events.Reload()
    return [
        (tag, event.step, event.tensor_proto.string_val[0].decode())
        for tag in events.Tags()["tensors"] for event in events.Tensors(tag)
    ]


def test_wandb_gets_verls_table_one_row_per_validation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An offline W&B run: each validation logs ``val/generations`` anew with every row so far."""
    pytest.importorskip("wandb")
    from omni_trainer.loggers import WandbSink

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    sink = WandbSink(tmp_path, "p", "e", {})
    sink.log_generations(0, [("q1", "a1", 0.0), ("q2", "a2", 1.0)])
    sink.log_generations(5, [("q1", "b1", 1.0), ("q2", "b2", 1.0)])
    sink.close()
    written = tmp_path.glob("wandb/offline-run-*/files/media/table/val/generations_*.table.json")
    tables = [json.loads(path.read_text()) for path in written]
    columns = ["step", "input_1", "output_1", "score_1", "input_2", "output_2", "score_2"]
    first, second = [0, "q1", "a1", 0.0, "q2", "a2", 1.0], [5, "q1", "b1", 1.0, "q2", "b2", 1.0]
    assert sorted(tables, key=lambda table: len(table["data"])) == [
        {"columns": columns, "data": [first]}, {"columns": columns, "data": [first, second]},
    ]


def test_the_key_is_checked_and_a_run_without_validation_says_nothing_is_logged(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"trainer.log_val_generations=-1 must be >= 0"):
        preflight(resolve_run(load_config(["trainer.log_val_generations=-1"])))
    assert not any("log_val_generations" in w for w in preflight(resolve_run(load_config(["trainer.log_val_generations=4"]))))
    talker = preflight(resolve_run(load_config(["trainer.log_val_generations=4", "actor_rollout_ref.model.stage=talker"])))
    assert any("trainer.log_val_generations=4 logs validation samples, and this run validates nothing" in w
               for w in talker)
