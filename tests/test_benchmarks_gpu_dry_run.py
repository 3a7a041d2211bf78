"""``benchmarks/gpu.py --dry-run`` on the CPU: the GPU benchmark's code path runs end to end
on the tiny sizes (our step; TRL's where TRL is installed), prints the memory plan of the
real Qwen3-Omni-30B-A3B thinker, and imports neither vLLM, verl nor Ray."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import json, runpy, sys
sys.argv = ["benchmarks/gpu.py", *sys.argv[1:]]
runpy.run_path("benchmarks/gpu.py", run_name="__main__")
heavy = sorted({name.split(".")[0] for name in sys.modules} & {"vllm", "vllm_omni", "verl", "ray"})
print("PROBE:" + json.dumps(heavy))
"""


def dry_run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "--dry-run", *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_dry_run_runs_our_step_and_plans_the_real_thinker(tmp_path: Path) -> None:
    out = dry_run("--skip-trl", "--out", str(tmp_path / "gpu.json"))
    assert "Memory plan: Qwen3-Omni-30B-A3B thinker (48 layers), one 141 GB GPU, bf16" in out
    # 48 layers x (attention 18.9M + 128 experts x 3 x 2048 x 768 + router) + 2 x 152064 x 2048
    # embeddings/head = 30.53B text parameters, plus the vision (0.54B) and audio (0.65B) encoders.
    assert "params 31.72B (model 30.22B, audio_tower 647.9M, visual 538.6M, lm_head 311.4M)" in out
    # LoRA r=16 on q/k/v/o: 48 x 16 x ((2048+4096) + 2 x (2048+512) + (4096+2048)) = 13.4M.
    assert "trainable: LoRA r=16 13.4M, full FT 30.53B" in out
    plan = next(line for line in out.splitlines() if line.strip().startswith("on 141 GB"))
    # LoRA without checkpointing: 63.4 GB weights + 62.6 activations + 10.0 logits > 92% of 141;
    # full fine-tuning: 126.9 GB fp32 weights + 122.1 GB gradients + 244.3 GB AdamW moments,
    # checkpointed or not.
    assert plan.split("usable)")[1].split() == ["does", "not", "fit", "fits", "does", "not", "fit", "does", "not", "fit"]
    assert "Memory plan of the GPU run: mid-size thinker (36 of 48 layers)" in out
    assert out.splitlines()[-1] == "PROBE:[]"  # no vLLM, vLLM-Omni, verl or Ray
    record = json.loads((tmp_path / "gpu.json").read_text())
    (ours,) = record["sides"]
    assert ours["name"] == "omni-rl local engine"
    assert ours["tokens"] == 2 * 2 * 4  # 2 prompts x n=2 x 4 tokens, one timed step
    assert record["dry_run"] is True and record["versions"]["torch"] != "not installed"


def test_dry_run_runs_trl_on_the_same_model(tmp_path: Path) -> None:
    pytest.importorskip("trl", reason="TRL is not installed here; it comes from the bench dependency group")
    out = dry_run("--out", str(tmp_path / "gpu.json"))
    record = json.loads((tmp_path / "gpu.json").read_text())
    ours, trl = record["sides"]
    assert trl["name"].startswith("TRL ") and ours["tokens"] == trl["tokens"] == 16
    assert out.splitlines()[-2].startswith("ratio ours/TRL: steps/s ")
