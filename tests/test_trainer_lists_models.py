"""`trainer --list-models` finds model packages through their entry points."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKE_PACKAGE_DIR = ROOT / "packages" / "omni-contracts" / "tests" / "fake_package"
TRAINER = Path(sys.executable).parent / "trainer"


def run_trainer(*args: str, pythonpath: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    return subprocess.run([str(TRAINER), *args], env=env, capture_output=True, text=True, check=False)


def test_lists_an_installed_model_package() -> None:
    done = run_trainer("--list-models", pythonpath=str(FAKE_PACKAGE_DIR))
    assert done.returncode == 0, done.stderr
    assert "fake_omni = fake_omni_model (from fake-omni-model)" in done.stdout
    assert "FakeOmniForConditionalGeneration thinker" in done.stdout
    assert "Rollout pipelines:\n  fake_omni" in done.stdout


def test_lists_both_qwen_families() -> None:
    done = run_trainer("--list-models")
    assert done.returncode == 0, done.stderr
    assert "qwen3_omni = omni_qwen3.adapters (from omni-qwen3)" in done.stdout
    assert "qwen2_5_omni = omni_qwen25.adapters (from omni-qwen25)" in done.stdout
    assert "Qwen3OmniMoeForConditionalGeneration thinker" in done.stdout
    assert "Qwen2_5OmniForConditionalGeneration thinker" in done.stdout
    assert "Rollout pipelines:\n  qwen2_5_omni\n  qwen3_omni_moe" in done.stdout


def test_reports_a_broken_model_package(tmp_path: Path) -> None:
    (tmp_path / "broken_models.py").write_text("raise ImportError('no such thing')\n")
    info = tmp_path / "broken_models-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-models\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[omni_rl.models]\nbroken = broken_models\n")
    done = run_trainer("--list-models", pythonpath=str(tmp_path))
    assert done.returncode == 1
    assert "broken = broken_models: ImportError: no such thing" in done.stderr
