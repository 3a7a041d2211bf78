"""The import-linter contracts hold, and each one fails when its rule is broken.

Each case copies the workspace sources to a temporary folder, adds one module with a
forbidden import, and lints the copy (it shadows the editable installs on PYTHONPATH).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / ".importlinter"
LINT = Path(sys.executable).parent / "lint-imports"
SOURCES = sorted((ROOT / "packages").glob("*/src/*")) + sorted((ROOT / "apps").glob("*/src/*"))


def lint(src: Path, contract: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(LINT), str(CONFIG), "--no-cache", "--no-logo"]
    if contract:
        command += ["--contract", contract]
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(command, env=env, cwd=src, capture_output=True, text=True, check=False)


@pytest.fixture
def workspace_copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    for package in SOURCES:
        if package.is_dir():
            shutil.copytree(package, src / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    return src


def test_every_workspace_package_is_a_root_package() -> None:
    text = CONFIG.read_text()
    assert {package.name for package in SOURCES if package.is_dir()} == {
        "omni_contracts", "omni_model_kit", "omni_training", "omni_rollout", "omni_rewards",
        "omni_data", "omni_qwen3", "omni_qwen25", "omni_vllm_cpu", "omni_verl_cpu", "omni_verl", "omni_trainer",
    }
    for package in SOURCES:
        assert f"    {package.name}\n" in text, f"{package.name} is not linted"


def test_the_real_tree_keeps_every_contract() -> None:
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "15 kept, 0 broken" in done.stdout


@pytest.mark.parametrize(
    ("contract", "package", "source"),
    [
        ("layers", "omni_training", "import omni_trainer.cli\n"),
        ("contracts-standalone", "omni_contracts", "import omni_rewards\n"),
        ("contracts-light", "omni_contracts", "import torch\n"),
        ("contracts-light", "omni_contracts", "def f():\n    import transformers\n"),
        ("components-independent", "omni_rewards", "from omni_data import __doc__\n"),
        ("components-independent", "omni_qwen3", "import omni_training\n"),
        ("components-independent", "omni_qwen25", "import omni_qwen3.adapters\n"),
        ("layers", "omni_qwen25", "import omni_trainer\n"),
        ("layers", "omni_model_kit", "import omni_qwen3\n"),
        ("contracts-standalone", "omni_contracts", "import omni_model_kit.tiny\n"),
        ("model-kit-for-models", "omni_rollout", "from omni_model_kit import thinker_processor\n"),
        ("model-kit-for-models", "omni_training", "def f():\n    import omni_model_kit\n"),
        ("engines-independent", "omni_trainer/engines/local", "import omni_trainer.engines.verl.translate\n"),
        ("engines-independent", "omni_trainer/engines/verl", "def f():\n    from omni_trainer.engines.local import trainer\n"),
        ("vllm-cpu-standalone", "omni_vllm_cpu", "def f():\n    import omni_rollout.vllm_omni\n"),
        ("one-model-named", "omni_trainer", "def f():\n    from omni_qwen3.tiny import build_tiny_qwen3_omni\n"),
        ("one-model-named", "omni_trainer/engines/verl", "import omni_qwen25\n"),
        ("app-layers", "omni_trainer/engines/local", "import omni_trainer.cli\n"),
        ("app-layers", "omni_trainer/engines/verl", "def f():\n    from omni_trainer.preflight import preflight\n"),
        ("app-layers", "omni_trainer", "import omni_trainer.config\n"),  # a module no layer names
        ("app-acyclic", "omni_trainer/engines", "def f():\n    import omni_trainer.preflight\n"),
        ("app-acyclic", "omni_trainer/engines/local/tasks", "def f():\n    import omni_trainer.engines.local.trainer\n"),
        ("verl-cpu-standalone", "omni_verl_cpu", "def f():\n    from omni_trainer.engines.verl import translate\n"),
        ("verl-cpu-standalone", "omni_verl_cpu", "from omni_verl import settings\n"),
        ("verl-standalone", "omni_verl", "def f():\n    from omni_trainer.engines.verl import translate\n"),
        ("verl-cpu-above-components", "omni_data", "import omni_verl.settings\n"),
        ("local-engine-without-verl", "omni_trainer/engines/local", "import omni_verl.settings\n"),
        ("verl-cpu-plugin-by-name", "omni_verl", "import omni_verl_cpu.speech\n"),
        ("verl-cpu-above-components", "omni_rollout", "import omni_verl_cpu\n"),
        ("verl-cpu-plugin-by-name", "omni_trainer/engines/verl", "def f():\n    from omni_verl_cpu.rollout import LocalRolloutReplica\n"),
        ("verl-cpu-plugin-by-name", "omni_trainer", "import omni_verl_cpu.gloo_checkpoint\n"),
    ],
)
def test_each_contract_fails_when_broken(
    workspace_copy: Path, contract: str, package: str, source: str
) -> None:
    assert lint(workspace_copy, contract).returncode == 0  # the copy is clean
    (workspace_copy / package / "_violation.py").write_text(source)
    done = lint(workspace_copy, contract)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "BROKEN" in done.stdout
    if contract == "app-acyclic":  # import-linter names the imports that would break the circle
        assert "No cycles are allowed in omni_trainer" in done.stdout
    else:
        assert f"{package.replace('/', '.')}._violation" in done.stdout


def test_type_checking_imports_do_not_count_as_heavy(workspace_copy: Path) -> None:
    (workspace_copy / "omni_contracts" / "_typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
    )
    done = lint(workspace_copy, "contracts-light")
    assert done.returncode == 0, done.stdout + done.stderr
