from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

FAKE_PACKAGE_DIR = Path(__file__).parent / "fake_package"


@pytest.fixture(scope="session")
def fake_package_dir() -> Path:
    """A folder that, on sys.path, installs the fake model package with its entry point."""
    return FAKE_PACKAGE_DIR


@pytest.fixture(scope="session")
def fake() -> Iterator[ModuleType]:
    """The fake model package, imported (its adapters register on import)."""
    sys.path.insert(0, str(FAKE_PACKAGE_DIR))
    try:
        import fake_omni_model

        yield fake_omni_model
    finally:
        sys.path.remove(str(FAKE_PACKAGE_DIR))


@pytest.fixture
def fake_model(fake: ModuleType) -> object:
    import torch

    torch.manual_seed(0)
    return fake.FakeOmniModel()


@pytest.fixture
def fake_config(fake: ModuleType) -> SimpleNamespace:
    return SimpleNamespace(architectures=[fake.FAKE_ARCH])
