"""A run without ``data.val_files`` says so, and never scores training rows as ``val-core/*``."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from omni_trainer.cli import main
from omni_trainer.config import load_config
from omni_trainer.preflight import preflight
from omni_trainer.reporting import NO_VALIDATION
from omni_trainer.resolved import resolve_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_folders import QWEN3, minimal_checkpoint  # noqa: E402


def test_the_preflight_warns(tmp_path: Path) -> None:
    files = {}
    for split in ("train", "test"):
        files[split] = tmp_path / f"{split}.parquet"
        pq.write_table(pa.table({"data_source": ["openai/gsm8k"] * 2, "prompt": ["q"] * 2}), files[split])
    base = [f"actor_rollout_ref.model.path={minimal_checkpoint(tmp_path / 'model', QWEN3)}",
            f"data.train_files=[{files['train']}]", "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2"]
    warnings = preflight(resolve_run(load_config(base)))
    assert any(w.startswith(NO_VALIDATION) and "training rows are not scored" in w for w in warnings), warnings
    # Given val files, or on the built-in task (its own validation rows), nothing to say.
    assert not any(NO_VALIDATION in w for w in preflight(resolve_run(load_config([*base, f"data.val_files=[{files['test']}]"]))))
    assert not any(NO_VALIDATION in w for w in preflight(resolve_run(load_config([]))))


@pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="needs the distributed extra")
def test_verl_never_validates_on_the_train_files() -> None:
    from omni_trainer.engines.verl.translate import to_verl_config

    base = ["actor_rollout_ref.model.path=/m", "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
            "data.train_files=[/d/train.parquet]", "trainer.engine=verl",
            "trainer.test_freq=5", "trainer.val_before_train=true"]
    verl = to_verl_config(load_config(base), lora_target_modules=None, lora_exclude_modules=None)
    assert (verl.trainer.test_freq, verl.trainer.val_before_train) == (-1, False)
    assert list(verl.data.val_files) == ["/d/train.parquet"]  # verl loads a validation set regardless; unused
    given = to_verl_config(load_config([*base, "data.val_files=[/d/test.parquet]"]),
                           lora_target_modules=None, lora_exclude_modules=None)
    assert (given.trainer.test_freq, given.trainer.val_before_train) == (5, True)
    assert list(given.data.val_files) == ["/d/test.parquet"]


@pytest.fixture
def isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNI_RL_CACHE", str(tmp_path_factory.getbasetemp() / "omni-rl-cache"))


@pytest.mark.slow
def test_local_run_without_val_files_reports_no_validation(
    tmp_path: Path, isolated_cache: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, the local engine validated on the first training rows and logged them as val-core/*."""
    from omni_model_kit.tiny import default_cache_dir
    from omni_qwen3.tiny import build_tiny_qwen3_omni
    from omni_data.builtin import write_builtin_task

    train, _ = write_builtin_task(default_cache_dir(), train_rows=4, val_rows=2, seed=0)
    run = tmp_path / "run"
    argv = [
        f"actor_rollout_ref.model.path={build_tiny_qwen3_omni()}", f"data.train_files=[{train}]",
        "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "data.max_response_length=2",
        "reward.num_workers=1", "trainer.save_freq=0", "trainer.total_training_steps=1", "trainer.test_freq=1",
        f"trainer.default_local_dir={run}",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert f"warning: {NO_VALIDATION}" in captured.err
    assert f"validation at step 0: no validation rows ({NO_VALIDATION})" in captured.out
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows and not [key for row in rows for key in row if key.startswith("val-core/")]
    assert "critic/score/mean" in rows[-1]  # it trained
    assert f"validation: none ({NO_VALIDATION})" in (run / "summary.txt").read_text()
