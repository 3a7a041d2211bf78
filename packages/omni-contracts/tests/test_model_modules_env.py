"""OMNI_RL_MODEL_MODULES: model packages named by module, for a checkout run without installing
it (no distribution metadata, so no entry points)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from omni_contracts import MODEL_ENTRY_POINT_GROUP, ModelPackageImportError, ModelPackageLoader

ENV = "OMNI_RL_MODEL_MODULES"


def test_named_modules_load_with_the_entry_points_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "env_named_models.py").write_text("import sys\nsys.env_named_models_loads = "
                                                  "getattr(sys, 'env_named_models_loads', 0) + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "env_named_models_loads", 0, raising=False)
    # An installed package's module named again (omni_qwen3.adapters) is listed once, as installed.
    monkeypatch.setenv(ENV, " env_named_models, ,omni_qwen3.adapters,env_named_models")
    loader = ModelPackageLoader()
    listed = [package.describe() for package in loader.installed()]
    assert listed[-1] == "env_named_models (from $OMNI_RL_MODEL_MODULES)"
    assert [d for d in listed if "omni_qwen3.adapters" in d] == ["qwen3_omni = omni_qwen3.adapters (from omni-qwen3)"]
    loader.load_all()
    loader.load_all()
    assert sys.env_named_models_loads == 1  # type: ignore[attr-defined]


def test_a_named_module_that_fails_is_reported_by_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "no_such_models_module")
    with pytest.raises(ModelPackageImportError) as info:
        ModelPackageLoader().load_all()
    assert ("no_such_models_module (from $OMNI_RL_MODEL_MODULES): ModuleNotFoundError: No module named "
            "'no_such_models_module'") in str(info.value)


def test_only_the_model_group_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "no_such_models_module")
    assert ModelPackageLoader("omni_rl.tests.other").installed() == []
    assert ModelPackageLoader(MODEL_ENTRY_POINT_GROUP).installed()[-1].from_env
