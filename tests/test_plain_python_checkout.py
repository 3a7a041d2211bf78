"""This checkout run with plain ``python`` and nothing of it installed, as on a GPU machine with
its own torch/transformers/peft, no uv, no network and no vLLM, verl or Ray.

The interpreter is a venv whose site-packages is this environment's minus omni-rl's own
distributions (their dist-info, so no ``omni_rl.models`` entry points, and their editable-path
``.pth`` files) and minus vLLM, vLLM-Omni, verl and Ray. The checkout comes through
``PYTHONPATH`` (``packages/*/src``, ``apps/trainer/src``) and the model packages through
``OMNI_RL_MODEL_MODULES``, as docs/engines/verl-gpu.md, "Without installing", documents.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKOUT_PATH = os.pathsep.join([*(str(p) for p in sorted(ROOT.glob("packages/*/src"))), str(ROOT / "apps/trainer/src")])
MODEL_MODULES = "omni_qwen3.adapters,omni_qwen25.adapters"
LEFT_OUT = re.compile(r"^(omni_|_editable_impl_omni_|(vllm|vllm_omni|verl|ray)($|-\d))")


@pytest.fixture(scope="module")
def plain_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plain")
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)  # type: ignore[attr-defined]
    (site,) = (root / "venv" / "lib").glob("python*/site-packages")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not LEFT_OUT.match(entry.name):
            (site / entry.name).symlink_to(entry)
    python = root / "venv" / "bin" / "python"
    probe = ("import importlib.metadata as m, importlib.util as u; "
             "print([d.metadata['Name'] for d in m.distributions() if d.metadata['Name'].startswith('omni-')], "
             "[n for n in ('vllm', 'verl', 'ray', 'omni_contracts') if u.find_spec(n)])")
    done = subprocess.run([str(python), "-c", probe], env=plain_env(path=""), capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[] []"  # no omni-rl distribution, no vLLM/verl/Ray, no checkout on the path
    return python


def plain_env(*, path: str = CHECKOUT_PATH, modules: str | None = MODEL_MODULES) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OMNI_RL_MODEL_MODULES", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=path, PYTHONNOUSERSITE="1")
    if modules is not None:
        env["OMNI_RL_MODEL_MODULES"] = modules
    return env


def run(python: Path, *args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def test_model_packages_are_found_through_the_env_var(plain_python: Path) -> None:
    without = run(plain_python, "-m", "omni_trainer.cli", "--list-models", env=plain_env(modules=None))
    assert without.returncode == 0, without.stderr
    assert "none installed (a checkout run without installing it: name the modules in OMNI_RL_MODEL_MODULES)" in without.stdout
    done = run(plain_python, "-m", "omni_trainer.cli", "--list-models", env=plain_env())
    assert done.returncode == 0, done.stderr
    assert "omni_qwen3.adapters (from $OMNI_RL_MODEL_MODULES)" in done.stdout
    assert "Qwen3OmniMoeForConditionalGeneration thinker" in done.stdout
    assert "Rollout pipelines:\n  qwen2_5_omni\n  qwen3_omni_moe" in done.stdout


def test_smoke_script_runs_the_local_check_with_that_python_and_skips_vllm_and_verl(plain_python: Path,
                                                                                   tmp_path: Path) -> None:
    """No uv on PATH: the script takes ``python`` from PATH (OMNI_RL_PYTHON=... does the same
    with uv present) and derives OMNI_RL_MODEL_MODULES from the checkout's pyproject files."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(plain_python)
    env = {**plain_env(path="", modules=None), "PATH": f"{bin_dir}:/usr/bin:/bin", "DRY_RUN": "1"}
    for extra in ({}, {"OMNI_RL_PYTHON": str(plain_python), "PATH": os.environ["PATH"]}):
        done = subprocess.run(["bash", "tests/gpu/run_gpu_smoke.sh"], cwd=ROOT, env={**env, **extra},
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        out = done.stdout
        assert "OMNI_RL_MODEL_MODULES=omni_qwen25.adapters,omni_qwen3.adapters" in out
        assert f"{plain_python if extra else bin_dir / 'python'} on this checkout (no uv sync)" in out
        assert re.search(r"would run: \S*/python tests/gpu/local_smoke.py", out), out
        assert "skipping vllm: " in out and "cannot import vllm, vllm_omni and pytest (the gpu extra)" in out
        assert "skipping the verl phases (gspo opd mm): " in out


@pytest.mark.slow
def test_local_gpu_check_runs_from_the_checkout(plain_python: Path) -> None:
    """tests/gpu/local_smoke.py, on the CPU here (``--device cpu``), one step."""
    done = run(plain_python, "tests/gpu/local_smoke.py", "--device", "cpu", "--steps", "1", env=plain_env(), timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "FAIL" not in done.stdout and "pearson rollout~actor" in done.stdout


@pytest.mark.slow
def test_gpu_benchmark_dry_run_runs_from_the_checkout(plain_python: Path, tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    done = run(plain_python, "benchmarks/gpu.py", "--dry-run", "--skip-trl", "--out", str(out), env=plain_env(),
               timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Memory plan: Qwen3-Omni-30B-A3B thinker (48 layers), one 141 GB GPU, bf16" in done.stdout
    record = json.loads(out.read_text())
    assert record["dry_run"] is True and record["sides"][0]["name"] == "omni-rl local engine"
