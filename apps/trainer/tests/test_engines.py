"""The engines behind ``trainer.engine``: one per name the config accepts, each with its own
pre-flight checks (what each refuses is tested with the keys: test_verl_keys.py,
test_verl_translate.py, test_preflight.py)."""

from __future__ import annotations

import pytest

from omni_trainer.config import Config, ConfigError, load_config
from omni_trainer.engines import ENGINE_MODULES, engine_for
from omni_trainer.keys import declared_keys


def test_each_engine_the_config_accepts_exists_under_its_name() -> None:
    (engine_key,) = [declared for declared in declared_keys(Config) if declared.name == "trainer.engine"]
    assert set(engine_key.doc.choices) == set(ENGINE_MODULES)
    for name in ENGINE_MODULES:
        engine = engine_for(name)
        assert engine.name == name and engine.checks and callable(engine.run)
    with pytest.raises(ConfigError, match="trainer.engine='megatron'; valid: local, verl"):
        engine_for("megatron")

