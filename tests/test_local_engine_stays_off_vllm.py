"""The local engine never imports vLLM or vLLM-Omni, even with the gpu extra installed.

vLLM-Omni's import takes ~20 s, prints screens of warnings and patches torch's inductor at
import time; a CPU run that never uses it must not pay for or be changed by it. Runs the
trainer's own entry point on the embedded default (the tiny model, the built-in
image+audio task) for one step in a fresh interpreter and lists what got imported.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

if importlib.util.find_spec("vllm_omni") is None:  # pragma: no cover
    pytest.skip("vacuous without the gpu extra (uv sync --extra distributed --extra gpu)", allow_module_level=True)

PROBE = """
import json, sys
from omni_trainer.cli import main
code = main(sys.argv[1:])
leaked = sorted({name.split(".")[0] for name in sys.modules} & {"vllm", "vllm_omni"})
print("PROBE:" + json.dumps({"code": code, "leaked": leaked}))
"""


def test_embedded_default_run_leaves_vllm_unimported(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "trainer.total_training_steps=1", "trainer.val_before_train=false",
         "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
         f"trainer.default_local_dir={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=900,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE:")]
    assert lines, f"the trainer did not finish (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    result = json.loads(lines[-1].removeprefix("PROBE:"))
    assert result["code"] == 0, done.stderr[-3000:]
    assert result["leaked"] == [], f"the local engine imported {result['leaked']}"
