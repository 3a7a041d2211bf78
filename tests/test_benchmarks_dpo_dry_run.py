"""``benchmarks/dpo.py`` at toy sizes: our side (text, image and audio pairs) runs end to end
without TRL and writes its raw numbers; where TRL is installed (the bench group), the
whole-step differential passes too. Nothing here is timed against a threshold."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "benchmarks/dpo.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_our_side_runs_on_text_image_and_audio_pairs(tmp_path: Path) -> None:
    out = run("--skip-trl", "--steps", "1", "--pairs", "2", "--micro-pairs", "1", "--out", str(tmp_path / "dpo.json"))
    record = json.loads((tmp_path / "dpo.json").read_text())
    assert record["peer"] is None and record["trl_media_probe"] == {}
    for side in (record["ours"], *record["media"].values()):
        assert len(side["step_seconds"]) == 1 and len(side["step_tokens"]) == 1
        # 2 pairs: 2 prompts x 2 rows, plus the answers; the answers are a part of it.
        assert side["step_tokens"][0] > side["step_completion_tokens"][0] > 0
        assert all(math.isfinite(loss) for loss in side["losses"])
    assert set(record["media"]) == {"image", "audio"}
    assert "TRL cannot train the audio pairs" in out and "ratio ours/TRL" not in out


def test_the_whole_step_differential_passes(tmp_path: Path) -> None:
    pytest.importorskip("trl", reason="TRL is not installed here; it comes from the bench dependency group")
    run("--check", "--pairs", "2", "--micro-pairs", "1", "--out", str(tmp_path / "check.json"))
    record = json.loads((tmp_path / "check.json").read_text())
    assert record["passed"] is True
    assert record["max_abs_diff"]["parameters"] <= 1e-4 and record["max_abs_diff"]["lora_init"] == 0.0
