"""docs/architecture.md stays true: every path and dotted name it gives exists, and it is
complete where it claims to be (every engine, every package of the layering, every registry
of the workspace)."""

from __future__ import annotations

import ast
import configparser
import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

from omni_contracts import Registry

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()
PATH = re.compile(r"(?<![\w/.-])((?:packages|apps|tests|examples|docs)/[\w./-]*\w)")
DOTTED = re.compile(r"`(omni_\w+(?:\.\w+)+)`")


def resolve(dotted: str) -> Any:
    """The object a dotted name gives: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(dotted)


def test_every_path_it_names_exists() -> None:
    paths = set(PATH.findall(DOC))
    assert len(paths) > 10, paths
    assert sorted(path for path in paths if not (ROOT / path).exists()) == []


def test_every_dotted_name_it_gives_exists() -> None:
    names = set(DOTTED.findall(DOC))
    assert len(names) > 15, names
    if importlib.util.find_spec("verl") is None or importlib.util.find_spec("vllm") is None:  # pragma: no cover
        names = {name for name in names if not name.startswith("omni_trainer.engines.verl.")}  # CI has the extras
    for name in sorted(names):
        resolve(name)  # raises for a name that moved


def test_it_names_every_engine_and_every_package_of_the_layering() -> None:
    from omni_trainer.engines import ENGINE_MODULES

    engines = DOC[DOC.index("## Engines"):DOC.index("### One step on the local engine")]
    for name, module in ENGINE_MODULES.items():
        package = f"apps/trainer/src/{module.replace('.', '/')}/"
        assert (ROOT / package / "__init__.py").is_file(), module  # each engine is a package of its own
        assert f"- `{name}` (`{package}`)" in engines, name
    layering = configparser.ConfigParser()
    layering.read(ROOT / ".importlinter")
    packages = DOC[DOC.index("## Packages"):DOC.index("## Engines")]
    for package in layering["importlinter"]["root_packages"].split():
        assert re.search(rf"\s{package}:", packages), package


def test_the_registry_table_lists_every_registry_of_the_workspace() -> None:
    """Module-level ``NAME = <...>Registry(...)`` anywhere in the workspace's sources."""
    defined = set()
    for source in [*ROOT.glob("packages/*/src/**/*.py"), *ROOT.glob("apps/*/src/**/*.py")]:
        for node in ast.parse(source.read_text()).body:
            value, targets = None, []
            if isinstance(node, ast.Assign):
                value, targets = node.value, node.targets
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                value, targets = node.value, [node.target]
            if isinstance(value, ast.Call):
                called = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
                if called.endswith("Registry"):
                    defined.update(t.id for t in targets if isinstance(t, ast.Name))
    section = DOC[DOC.index("## Registries"):DOC.index("## Where new things go")]
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    listed = {name.rsplit(".", 1)[1]: name for name in DOTTED.findall(table)}
    assert defined == set(listed), (defined, set(listed))
    for name in listed.values():
        assert isinstance(resolve(name), Registry), name
