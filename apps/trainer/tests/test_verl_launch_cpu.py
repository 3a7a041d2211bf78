"""``trainer.engine=verl`` on a machine without a GPU, as a new user would run it.

The real command with the tiny model and real image+audio files gets past verl's imports,
the config translation and verl's own ``validate_config``, loads every row through the
dataset class verl will use, and then stops with one message that a GPU is needed (exit
status 2, no traceback).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]

if importlib.util.find_spec("verl") is None or importlib.util.find_spec("vllm_omni") is None:  # pragma: no cover
    pytest.skip("needs the extras (uv sync --extra distributed --extra gpu)", allow_module_level=True)


def test_verl_engine_checks_everything_then_asks_for_a_gpu(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():  # pragma: no cover
        pytest.skip("a GPU is visible: this checks the CPU-only stop (tests/gpu runs the GPU path)")
    sys.path.insert(0, str(ROOT / "tests" / "gpu"))
    from verl_smoke import image_audio_rows

    from omni_qwen3.tiny import build_tiny_qwen3_omni

    model = build_tiny_qwen3_omni(tmp_path / "tiny", seed=0)
    train, val = image_audio_rows(tmp_path / "data", rows=4)
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "omni_trainer.cli", "trainer.engine=verl", f"actor_rollout_ref.model.path={model}",
         f"data.train_files={train}", f"data.val_files={val}", "data.train_batch_size=4",
         "actor_rollout_ref.actor.ppo_mini_batch_size=4", f"trainer.default_local_dir={run_dir}"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 2, done.stderr[-4000:]
    assert "Traceback" not in done.stderr
    assert "trainer.engine=verl needs a CUDA GPU" in done.stderr
    assert "All configuration checks passed" in done.stdout  # verl's own validate_config ran
    assert done.stdout.count("read 4 rows, kept 4, dropped 0") == 2  # train and validation files
    assert (run_dir / "verl_config.yaml").is_file()
