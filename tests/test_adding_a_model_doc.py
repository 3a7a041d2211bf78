"""docs/adding-a-model.md stays true: every path, hook, entry point, wiring step and command
it names is checked against the tree, in both directions where the doc claims to be complete
(every hook of the contracts, every check of the contract kit, every import-linter list
that names model packages)."""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path

import pytest

from omni_contracts import MODEL_ENTRY_POINT_GROUP, RolloutAdapter, TrainingAdapter, testing

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "adding-a-model.md").read_text()
EXAMPLE = ROOT / "packages" / "omni-qwen25"
PATH = re.compile(r"(?<![\w/.-])((?:packages|apps|tests|examples|docs)/[\w./-]*\w)")


def section(number: int) -> str:
    """The text of ``## <number>. ...`` up to the next ``## `` (or the end)."""
    match = re.search(rf"^## {number}\. .*?(?=^## |\Z)", DOC, re.M | re.S)
    assert match, f"docs/adding-a-model.md has no section '## {number}.'"
    return match.group(0)


def table_names(text: str) -> list[str]:
    """The backticked names in the first column of the tables in ``text``."""
    return re.findall(r"^\| `(\w+)` \|", text, re.M)


def model_packages() -> dict[str, str]:
    """Distribution name -> import name of every workspace package that declares the model
    entry point."""
    found = {}
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        if MODEL_ENTRY_POINT_GROUP in project.get("entry-points", {}):
            found[project["name"]] = project["name"].replace("-", "_")
    return found


def test_every_path_it_names_exists() -> None:
    paths = set(PATH.findall(DOC))
    assert len(paths) > 20, paths  # the layout block alone names 17
    missing = sorted(path for path in paths if not (ROOT / path.rstrip("/")).exists())
    assert not missing, f"docs/adding-a-model.md names paths that do not exist: {missing}"


def test_the_layout_block_lists_every_source_file_of_the_example_package() -> None:
    source = {
        str(path.relative_to(ROOT)) for path in (EXAMPLE / "src").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    named = set(PATH.findall(section(1)))
    # tiny/__init__.py only re-exports build's names; everything else must be in the layout.
    unlisted = sorted(source - named - {"packages/omni-qwen25/src/omni_qwen25/tiny/__init__.py"})
    assert not unlisted, f"section 1 does not list {unlisted}"


def test_the_entry_point_block_is_the_example_packages() -> None:
    (block,) = re.findall(r"```toml\n(.*?)```", DOC, re.S)
    documented = tomllib.loads(block)["project"]["entry-points"]
    declared = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]["entry-points"]
    assert list(documented)[0] == MODEL_ENTRY_POINT_GROUP
    assert documented == declared  # the model group, and vLLM's plugins where the package has one


def test_the_registration_lines_quoted_register_the_example_adapters() -> None:
    import ast

    from omni_contracts import get_rollout_adapter, get_training_adapter
    from omni_qwen25.adapters import Qwen25OmniRolloutAdapter, Qwen25OmniThinkerAdapter

    quoted = dict(re.findall(r"`@(Training|Rollout)Adapter\.register(\(.*?\))`", DOC))
    assert set(quoted) == {"Training", "Rollout"}, quoted
    training = ast.parse(f"f{quoted['Training']}").body[0].value  # type: ignore[attr-defined]
    architecture = ast.literal_eval(training.args[0])
    stage = ast.literal_eval(training.keywords[0].value)
    assert isinstance(get_training_adapter(architecture, stage), Qwen25OmniThinkerAdapter)
    pipeline = ast.literal_eval(ast.parse(f"f{quoted['Rollout']}").body[0].value.args[0])  # type: ignore[attr-defined]
    assert isinstance(get_rollout_adapter(pipeline), Qwen25OmniRolloutAdapter)


def public_hooks(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")} - {"register"}


def test_the_training_hook_table_is_the_contract() -> None:
    named = table_names(section(3))
    assert len(named) == len(set(named)), named
    assert set(named) == public_hooks(TrainingAdapter), (
        "section 3's table must list every public hook/attribute of omni_contracts.TrainingAdapter and no other"
    )


def test_the_rollout_hook_table_is_the_contract() -> None:
    named = table_names(section(5))
    assert len(named) == len(set(named)), named
    # `modes` is named in the prose; `check_mode` is a helper, not a hook.
    assert set(named) == public_hooks(RolloutAdapter) - {"modes", "check_mode"}, (
        "section 5's table must list every public hook of omni_contracts.RolloutAdapter and no other"
    )
    assert "`modes`" in section(5)


def test_the_processor_table_is_the_protocol_and_the_example_has_it() -> None:
    from omni_qwen25.processor import Qwen25OmniThinkerProcessor

    from omni_contracts.thinker_processor import PROCESSOR_MEMBERS

    named = table_names(section(4))
    assert sorted(named) == sorted(PROCESSOR_MEMBERS), named  # the table is the protocol
    for name in named:
        assert hasattr(Qwen25OmniThinkerProcessor, name), name
    # The callers it names look the pieces up by these names.
    callers = {
        "pad_token_ids": ROOT / "packages/omni-rollout/src/omni_rollout/placeholders.py",
        "dedup_pad_tokens": ROOT / "packages/omni-rollout/src/omni_rollout/vllm_omni/prompts.py",
    }
    for name, caller in callers.items():
        assert f'"{name}"' in caller.read_text(), (name, caller)


def test_the_contract_kit_list_is_the_kit() -> None:
    named = set(re.findall(r"`(check_\w+)`", section(6)))
    kit = {name for name in dir(testing) if name.startswith("check_")}
    assert named == kit, f"section 6 names {sorted(named - kit)} not in the kit and omits {sorted(kit - named)}"


def test_the_tests_it_points_to_exist() -> None:
    tests = "".join(p.read_text() for p in ROOT.glob("packages/*/tests/*.py"))
    for name in re.findall(r"`(test_\w+)`", DOC):
        assert f"def {name}(" in tests, name


def test_the_workspace_wiring_holds_for_every_model_package() -> None:
    packages = model_packages()
    assert {"omni-qwen3", "omni-qwen25"} <= set(packages), packages
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    app = tomllib.loads((ROOT / "apps/trainer/pyproject.toml").read_text())["project"]
    for distribution, module in packages.items():
        assert root["tool"]["uv"]["sources"][distribution] == {"workspace": True}, distribution
        assert f"packages/{distribution}/src" in root["tool"]["mypy"]["mypy_path"], distribution
        assert module in root["tool"]["mypy"]["packages"], module
        assert distribution in app["dependencies"], distribution
        assert f"{distribution}[gpu]" in app["optional-dependencies"]["gpu"], distribution


def test_the_importlinter_lists_it_names_hold_every_model_package() -> None:
    wiring = section(2)
    named = {("importlinter", "root_packages")} if "`root_packages`" in wiring else set()
    for key, contract in re.findall(r"(?:`(\w+)` of|middle layer of)\s+`\[importlinter:contract:([\w-]+)\]`", wiring):
        named.add((f"importlinter:contract:{contract}", key or "layers"))
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    packages = list(model_packages().values())

    def lists(value: str, package: str) -> bool:
        return re.search(rf"(?<![\w.]){package}(?![\w.])", value) is not None

    # Every list that names a model package today is one the doc tells you to extend ...
    listing = {(name, key) for name in config.sections() for key, value in config[name].items()
               if any(lists(value, package) for package in packages)}
    assert named == listing, f"the doc names {sorted(named)}; .importlinter lists model packages in {sorted(listing)}"
    # ... and each of them holds every model package (the layers contract: in its middle layer).
    for name, key in named:
        value = config[name][key]
        if key == "layers":
            value = value.strip().splitlines()[1]
        missing = [package for package in packages if not lists(value, package)]
        assert not missing, f"[{name}] {key} lacks {missing}"


@pytest.mark.slow
def test_the_end_to_end_command_passes_the_preflight(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The doc's command, on a freshly built tiny model, passes the trainer's pre-flight
    (--print-config runs it) with the model's own pipeline; naming another is refused, as the
    doc says."""
    import importlib.util

    from omni_qwen25.tiny import build_tiny_qwen25_omni
    from omni_trainer.cli import main

    (block,) = re.findall(r"```bash\n(.*?)```", section(8), re.S)
    lines = [line.split("#")[0].split() for line in block.splitlines()]
    assert lines[0][:4] == ["uv", "run", "python", "-m"] and importlib.util.find_spec(lines[0][4]) is not None
    command = lines[1]
    assert command[:3] == ["uv", "run", "trainer"], command
    tiny = build_tiny_qwen25_omni(tmp_path / "tiny")
    args = [arg.replace("<tiny>", str(tiny)) for arg in command[3:]]
    assert main(["--print-config", *args]) == 0, capsys.readouterr()
    assert "pipeline_name: qwen2_5_omni" in capsys.readouterr().out
    assert main(["--print-config", *args, "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe"]) != 0
    assert "set actor_rollout_ref.rollout.pipeline_name=qwen2_5_omni" in capsys.readouterr().err
