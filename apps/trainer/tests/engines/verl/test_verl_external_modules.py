"""``VERL_USE_EXTERNAL_MODULES`` as users bring it: verl-omni's launchers export ``verl_omni``,
and verl imports every listed module in every process, the pre-flight's included (it died with
``ModuleNotFoundError: No module named 'verl_omni'``, exit 1)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from omni_trainer.engines.verl.external_modules import EXTERNAL_MODULES_ENV, external_modules
from omni_verl.settings import EXTERNAL_MODULE


def test_verl_omnis_module_gives_way_to_ours_and_the_users_others_are_kept() -> None:
    assert external_modules(None) == (EXTERNAL_MODULE, [])
    value, (note,) = external_modules("verl_omni")
    assert value == EXTERNAL_MODULE and "verl-omni's launchers export it" in note
    assert external_modules(f"json, verl_omni,{EXTERNAL_MODULE},json")[0] == f"{EXTERNAL_MODULE},json"
    with pytest.raises(ValueError, match=r"names 'no_such_module_here', which is not installed here"):
        external_modules("verl_omni,no_such_module_here")


def test_a_verl_omni_launchers_export_runs_the_pre_flight() -> None:
    """The command in a process of its own, as a user runs it (verl imports the modules once,
    on its own first import)."""
    pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed)")
    command = [sys.executable, "-m", "omni_trainer.cli", "trainer.engine=verl", "trainer.device=cpu", "--print-config"]
    kept = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, EXTERNAL_MODULES_ENV: "verl_omni"})
    assert kept.returncode == 0, kept.stderr[-3000:]
    assert "is replaced by omni-rl's own module" in kept.stderr and "No module named 'verl_omni'" not in kept.stderr
    missing = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False,
                             env={**os.environ, EXTERNAL_MODULES_ENV: "no_such_module_here"})
    assert missing.returncode == 2, missing.stderr[-3000:]
    assert "names 'no_such_module_here', which is not installed here" in missing.stderr
