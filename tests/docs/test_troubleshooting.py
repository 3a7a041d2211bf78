"""docs/troubleshooting.md has an entry for every family of problem the config loader and the
pre-flight report, keyed on the code that reports it, not on message wording:

- each pre-flight check (``omni_trainer.preflight.COMMON_CHECKS`` and every engine's ``checks``),
  as ``preflight._name`` / ``engines.<engine>._name``;
- each function of ``omni_trainer.config`` that reports a problem (raises ``ConfigError`` or
  appends to ``problems``), found in its source, as ``config.<function>``;
- each theme of ``omni_trainer.foreign_keys.THEMES`` (keys of engines and features omni-rl does
  not have), as ``foreign:<its first key>``.

A new check, reporting function or theme without an entry fails here; so does an entry whose
code is gone.
"""

from __future__ import annotations

import ast
import inspect
import re

from docs_source import DOCS
from omni_trainer import config as config_module
from omni_trainer import preflight
from omni_trainer.engines import ENGINE_MODULES, engine_for
from omni_trainer.foreign_keys import THEMES

PAGE = (DOCS / "troubleshooting.md").read_text()
RAISED_BY = re.compile(r"^\*Raised by:\* `([\w.:/-]+)`$", re.MULTILINE)


def check_families() -> set[str]:
    found = set()
    for check in preflight.COMMON_CHECKS:
        found.add(f"preflight.{check.__name__}")
    for name in ENGINE_MODULES:
        for check in engine_for(name).checks:
            found.add(f"{check.__module__.removeprefix('omni_trainer.')}.{check.__name__}")
    return found


def config_families() -> set[str]:
    """Functions of ``omni_trainer.config`` that raise ``ConfigError`` or append a problem."""
    tree = ast.parse(inspect.getsource(config_module))
    found = set()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for inner in ast.walk(node):
            raises = (isinstance(inner, ast.Raise) and isinstance(inner.exc, ast.Call)
                      and isinstance(inner.exc.func, ast.Name) and inner.exc.func.id == "ConfigError")
            appends = (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
                       and inner.func.attr in ("append", "extend") and isinstance(inner.func.value, ast.Name)
                       and inner.func.value.id == "problems")
            if raises or appends:
                found.add(f"config.{node.name}")
                break
    found.add("config.unknown_key_message")  # what load_config appends for an unknown key
    return found


def theme_families() -> set[str]:
    return {f"foreign:{theme.prefixes[0]}" for theme in THEMES}


def test_every_family_has_an_entry() -> None:
    families = check_families() | config_families() | theme_families()
    assert len(families) > 30
    documented = set(RAISED_BY.findall(PAGE))
    assert sorted(families - documented) == []


def test_every_entry_names_code_that_exists() -> None:
    families = check_families() | config_families() | theme_families()
    documented = RAISED_BY.findall(PAGE)
    assert len(documented) == len(set(documented)), "an entry is listed twice"
    assert sorted(set(documented) - families) == []


def test_the_families_are_found() -> None:
    # The walk itself: the checks of both engines and load_config's own reports are among them.
    assert {"preflight._vocabularies", "engines.local._batch", "engines.verl._verl_engine"} <= check_families()
    assert {"config.load_config", "config._parse", "config._check_choices"} <= config_families()
