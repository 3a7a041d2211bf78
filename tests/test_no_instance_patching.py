"""No code in the workspace re-binds a model's methods on an instance.

``module.forward = thinker.forward`` (the pattern verl-omni uses for Qwen3-Omni) hides the
policy from FSDP, PEFT and pickling behind an instance attribute; a policy with another
forward is a class of its own (``TrainingAdapter.policy_class``). The one exception is the
contract kit's own test that builds the violation to show ``check_no_rebound_methods``
catches it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_METHODS = frozenset({
    "forward", "generate", "prepare_inputs_for_generation",
    "get_input_embeddings", "set_input_embeddings", "get_output_embeddings", "set_output_embeddings",
})
ALLOWED = {("packages/omni-contracts/tests/test_testing_kit.py", "forward")}


def rebindings(source: str) -> list[tuple[int, str]]:
    """``(line, method)`` for each ``x.<method> = ...`` and ``setattr(x, "<method>", ...)``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr in MODEL_METHODS:
                found.append((node.lineno, target.attr))
        if (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in MODEL_METHODS
        ):
            found.append((node.lineno, str(node.args[1].value)))
    return found


def workspace_sources() -> list[Path]:
    roots = [ROOT / name for name in ("packages", "apps", "tests", "benchmarks", "examples")]
    return sorted(p for root in roots for p in root.rglob("*.py") if ".venv" not in p.parts)


def test_the_scanner_finds_both_spellings() -> None:
    source = "model.forward = thinker.forward\nsetattr(model, 'generate', g)\nmodel.config = c\n"
    assert rebindings(source) == [(1, "forward"), (2, "generate")]


def test_no_model_method_is_rebound_anywhere_in_the_workspace() -> None:
    sources = workspace_sources()
    assert len(sources) > 100  # the walk sees the workspace
    offenders = [
        f"{path.relative_to(ROOT)}:{line} re-binds {method}"
        for path in sources
        for line, method in rebindings(path.read_text(encoding="utf-8"))
        if (path.relative_to(ROOT).as_posix(), method) not in ALLOWED
    ]
    assert not offenders, "\n".join(offenders)
