"""The task interface of the local engine: the config names one task, the registry builds
it, and the RL step knows no task by name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from omni_trainer.config import load_config
from omni_trainer.resolved import resolve_run
from omni_trainer.engines.local.task import LoadedRun, Task
from omni_trainer.engines.local.tasks import LOCAL_TASKS, load_task
from omni_trainer.tasks import DISTILLATION, SPEECH_RL, TEXT_RL, task_name

STEP = Path(__file__).resolve().parents[3] / "src" / "omni_trainer" / "engines" / "local" / "step.py"


@pytest.mark.parametrize(
    ("overrides", "expected", "class_name"),
    [
        ([], TEXT_RL, "TextRL"),
        (["actor_rollout_ref.model.stage=talker"], SPEECH_RL, "SpeechRL"),
        (["distillation.enabled=true", "distillation.teacher_models.teacher_model.model_path=/teacher"],
         DISTILLATION, "Distillation"),
    ],
)
def test_the_config_names_one_task_and_the_registry_builds_it(
    overrides: list[str], expected: str, class_name: str
) -> None:
    config = load_config(overrides)
    assert task_name(config) == expected
    resolved = resolve_run(config)
    assert resolved.task == expected
    run = LoadedRun(resolved, "/model", None, None, None)
    task = load_task(run)
    assert isinstance(task, Task) and type(task).__name__ == class_name
    assert task.validates is (expected != SPEECH_RL)  # the speech task's curve is its measurement


def test_a_task_name_nobody_registered_lists_the_registered_ones() -> None:
    with pytest.raises(ValueError, match=r"distillation.*rl.*speech_rl"):
        LOCAL_TASKS.get("dpo")


def test_a_second_task_under_a_taken_name_is_refused() -> None:
    from omni_contracts import RegistrationError

    with pytest.raises(RegistrationError, match="rl"):
        LOCAL_TASKS.add(TEXT_RL, lambda run: Task(run))


def test_the_rl_step_names_no_task() -> None:
    """The talker/thinker and teacher branches live in the tasks' samplers: no name in the
    step's code (its identifiers and its imports) is a task's."""
    names = set()
    for node in ast.walk(ast.parse(STEP.read_text())):
        if isinstance(node, ast.Name | ast.arg):
            names.add(node.id if isinstance(node, ast.Name) else node.arg)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            names.update([node.module or "", *(alias.name for alias in node.names)])
    assert len(names) > 50
    assert sorted(n for n in names if re.search(r"talker|speech|teacher|distill|thinker", n, re.IGNORECASE)) == []
