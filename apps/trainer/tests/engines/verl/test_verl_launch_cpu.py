"""``trainer.engine=verl`` on a machine without a GPU, as a new user would run it.

The real command with the tiny model and real image+audio files (8 GPUs' worth of batch:
4 prompts x 8 samples, 4 a micro-batch) gets past verl's imports, the config translation and
verl's own ``validate_config``, loads every row through the
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
ROOT = Path(__file__).resolve().parents[5]

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
         "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
         f"trainer.default_local_dir={run_dir}"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 2, done.stderr[-4000:]
    assert "Traceback" not in done.stderr
    assert "trainer.engine=verl needs a CUDA GPU" in done.stderr
    # verl's own validate_config passed: it runs before the run directory is written (its verdict
    # is no longer printed; a failure would be, with exit 2 before verl_config.yaml exists)
    assert done.stdout.count("read 4 rows, kept 4, dropped 0") == 2  # train and validation files
    assert (run_dir / "verl_config.yaml").is_file()


def test_a_verl_talker_run_checks_everything_then_asks_for_a_gpu(tmp_path: Path) -> None:
    """``stage=talker`` on verl: the translated config (vLLM-Omni's talker mode, our speech
    agent loop, padded rows) passes verl's own ``validate_config`` and the rows load."""
    import torch

    if torch.cuda.is_available():  # pragma: no cover
        pytest.skip("a GPU is visible: this checks the CPU-only stop")
    from omni_data.schema import rl_row, write_rl_parquet
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    model = build_tiny_qwen3_omni(tmp_path / "tiny", seed=0)
    rows = [rl_row(data_source="my/speech", messages=[{"role": "user", "content": f"Say {i}."}], ground_truth="",
                   ability="speech", extra_info={"index": i}) for i in range(4)]
    train = write_rl_parquet(rows, tmp_path / "speech.parquet")
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "omni_trainer.cli", "trainer.engine=verl", f"actor_rollout_ref.model.path={model}",
         "actor_rollout_ref.model.stage=talker", "actor_rollout_ref.rollout.pipeline_mode=talker",
         "data.spoken_text=thinker", "reward.audio_rewards=[{name: duration, weight: 1.0}]",
         f"data.train_files=[{train}]", "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", f"trainer.default_local_dir={run_dir}"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 2, done.stderr[-4000:]
    assert "Traceback" not in done.stderr
    assert "trainer.engine=verl needs a CUDA GPU" in done.stderr
    verl_config = (run_dir / "verl_config.yaml").read_text()
    assert "default_agent_loop: omni_speech_agent" in verl_config and "pipeline_mode: talker" in verl_config
    assert "use_remove_padding: false" in verl_config
