"""NExT-QA's reward is verl-omni's ``choice_reward.py`` (its NextQA pull request reuses it):
our ``nextqa`` scorer against the test oracle's ``choice_reference`` on responses shaped by
the recipe's system prompt (reasoning in ``<think>``, then ``<answer>X</answer>``, five
options A-E) and the ground truths ``omni_data.convert.nextqa`` writes."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from omni_rewards import compute_score


def load_oracle() -> ModuleType:
    """The oracle module, by path (tests run in importlib mode, without sys.path entries)."""
    name = "omni_rewards_reference_oracle"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


choice_reference = load_oracle().choice_reference

THINK = "<think>Let me think. The boy picks up the ball, then... wait, he throws it. Hmm, A or C?</think>"
OPTIONS = {"A": "He throws it.", "B": "He kicks it.", "C": "He runs away.", "D": "He sits down.", "E": "He laughs."}


def responses(letter: str) -> Iterator[str]:
    """Answers to a five-way question, in the forms a policy writes them."""
    yield f"{THINK}\n<answer>{letter}</answer>"
    yield f"{THINK}<answer> {letter}\n</answer>"
    yield f"<answer>{letter}</answer>"
    yield f"{THINK}\n<answer>{letter.lower()}</answer>"  # lower case: the label is upper case
    yield f"{THINK}\n<answer>{letter}. {OPTIONS[letter]}</answer>"
    yield f"{THINK}\n<answer>({letter})</answer>"
    yield f"{THINK}\n<answer>{OPTIONS[letter]}</answer>"
    yield f"{THINK}\nThe answer is {letter}."  # no tags
    yield f"{THINK}\n<answer>{letter}"  # unclosed
    yield f"{THINK}\n<answer></answer>"
    yield f"<think><answer>{letter}</answer></think><answer>F</answer>"  # the first pair counts
    yield f"{THINK}<answer>F</answer><answer>{letter}</answer>"
    yield f"{THINK}<answer>{letter} or B</answer>"
    yield f"{THINK}</answer>{letter}<answer>"


def test_nextqa_agrees_with_the_reference() -> None:
    cases = [(s, f"<answer>{truth}</answer>") for truth in "ABCDE" for letter in "ABCDE" for s in responses(letter)]
    disagreements = [
        (solution, truth)
        for solution, truth in cases
        if {k: v for k, v in compute_score("nextqa", solution, truth).items() if k != "data_problem"}
        != choice_reference(solution, truth)
    ]
    assert not disagreements, disagreements[:5]
    assert len(cases) >= 300
    assert {choice_reference(s, t)["score"] for s, t in cases} == {0.0, 1.0}


def test_nextqa_worked_examples() -> None:
    truth = "<answer>C</answer>"  # what the converter writes for a "c" label
    assert compute_score("nextqa", f"{THINK}\n<answer>C</answer>", truth)["score"] == 1.0
    assert compute_score("nextqa", f"{THINK}\n<answer>c</answer>", truth)["score"] == 0.0  # case-sensitive
    assert compute_score("nextqa", f"{THINK}\n<answer>C. He runs away.</answer>", truth)["score"] == 0.0
