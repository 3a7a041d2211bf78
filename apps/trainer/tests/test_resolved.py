"""The run is resolved once and handed on; its files are read once per process, and again
when one changes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from omni_trainer import resolved
from omni_trainer.config import load_config
from omni_trainer.findings import Findings
from omni_trainer.interrupts import StopRequest
from omni_trainer.files import Checkpoint, checkpoint, data_file
from omni_trainer.resolved import ResolvedRun, resolve_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_folders import QWEN3, minimal_checkpoint  # noqa: E402


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


def test_the_cli_resolves_the_run_once_and_hands_that_run_to_every_check_and_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One ``ResolvedRun`` per command: the pre-flight's checks and the engine get the same
    object, and the training adapter is resolved once for all of them."""
    from omni_trainer import cli, preflight
    from omni_trainer.engines.local import LocalEngine

    model = minimal_checkpoint(tmp_path / "model", QWEN3)
    built: list[ResolvedRun] = []
    adapters: list[str] = []
    before_the_run: list[int] = []
    real_resolve = resolved.resolve_run

    def resolve(config: Any) -> ResolvedRun:
        before_the_run.append(len(adapters))  # load_config looked up the adapter's pipeline name
        built.append(real_resolve(config))
        return built[-1]

    monkeypatch.setattr(resolved, "resolve_run", resolve)
    real_adapter = Checkpoint.adapter

    def counted_adapter(self: Checkpoint, stage: str, options: dict[str, Any] | None = None) -> Any:
        adapters.append(self.path)
        return real_adapter(self, stage, options)

    monkeypatch.setattr(Checkpoint, "adapter", counted_adapter)
    seen: list[ResolvedRun] = []

    def watching(run: ResolvedRun, found: Findings) -> None:
        seen.append(run)

    def engine_run(self: LocalEngine, run: ResolvedRun, stop: StopRequest) -> int:
        seen.append(run)
        assert run.training_adapter() is run.training_adapter()
        return 0

    monkeypatch.setattr(preflight, "COMMON_CHECKS", (watching, *preflight.COMMON_CHECKS, watching))
    monkeypatch.setattr(LocalEngine, "run", engine_run)
    assert cli.main([f"actor_rollout_ref.model.path={model}", f"trainer.default_local_dir={tmp_path / 'run'}"]) == 0
    assert len(built) == 1 and len(seen) == 3 and all(run is built[0] for run in seen)
    # The pre-flight's model check resolved the adapter for the run; the engine reused it.
    assert before_the_run == [1] and adapters == [str(model)] * 2


def test_the_embedded_model_is_resolved_once_built(tmp_path: Path) -> None:
    run = resolve_run(load_config([]))
    assert run.model is None and run.task == "rl" and run.mode == run.config.actor_rollout_ref.rollout.pipeline_mode
    model = minimal_checkpoint(tmp_path / "tiny", QWEN3)
    built = run.with_model(str(model))
    assert built.model == checkpoint(str(model)) and built.config is run.config
    assert built.training_adapter() is built.training_adapter()
    assert built.once("verl_config", lambda: 1) == 1 and built.once("verl_config", lambda: 2) == 1
    assert run.once("verl_config", lambda: 3) == 3  # each run keeps what was derived from it
