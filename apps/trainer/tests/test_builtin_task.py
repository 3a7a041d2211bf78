"""The built-in task's rows say what their question asks for."""

from __future__ import annotations

import re

from omni_trainer.builtin_task import ANY_NUMBER, builtin_rows


def test_each_ground_truth_answers_its_question() -> None:
    """Before, every row's ground truth was a + b, "What is 9 times 4?" included (the format
    reward never read it, but val_generations and the verl engine's rows showed it)."""
    seen = set()
    for row in builtin_rows(200, seed=3):
        question = row["messages"][0]["content"][-1]["text"]
        truth = row["ground_truth"]
        if match := re.fullmatch(r"What is (\d) \+ (\d)\?", question):
            expected = str(int(match[1]) + int(match[2]))
        elif match := re.fullmatch(r"What is (\d) times (\d)\?", question):
            expected = str(int(match[1]) * int(match[2]))
        elif question.startswith("What number comes next"):
            expected = "4"
        else:
            expected = ANY_NUMBER
        assert truth == expected, (question, truth)
        seen.add(expected == ANY_NUMBER)
    assert seen == {True, False}
