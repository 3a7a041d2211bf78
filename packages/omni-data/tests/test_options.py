from __future__ import annotations

import pytest

from omni_data.convert.options import avqa_options, inline_options, mmk12_options


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        (["A. cat", "B. dog"], (["A. cat", "B. dog"], {"A": "cat", "B": "dog"})),
        # verl-omni reformats: any of . ) 、 : after the letter, either case, any order.
        (["b) dog", "A: cat", "C、 cow"], (["B. dog", "A. cat", "C. cow"], {"B": "dog", "A": "cat", "C": "cow"})),
        (["A. cat"], (["A. cat"], {"A": "cat"})),  # one option is a list too
        (["  A.   big cat  "], (["A. big cat"], {"A": "big cat"})),
        (["A. cat", "a. dog"], None),  # a letter repeats
        (["A. cat", "B. "], None),  # empty text
        (["A cat", "B. dog"], None),  # no marker
        (["A. cat", None], None),
        (["A. two\nlines"], None),  # an option is one line
        ([], None),
        ("A. cat B. dog", None),  # not a list
    ],
)
def test_avqa_options(entries: object, expected: tuple[list[str], dict[str, str]] | None) -> None:
    assert avqa_options(entries) == expected


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Which?\nA. 5.25\nB) 6\nC、 7", {"A": "5.25", "B": "6", "C": "7"}),
        ("Which? A. 1 B. 2 C. 3", {}),  # options on one line are not lines (verl-omni misses them too)
        ("Pick:\n(A) 1\n(B) 2", {}),  # parenthesised letters are not its markers
        ("Which?\nA. x\nF. y", {"A": "x"}),  # letters A-E only
        ("Which?\nA. old\nB. b\nA. new", {"A": "new", "B": "b"}),  # a repeated letter: last text, first place
        ("Solve for x.", {}),
    ],
)
def test_mmk12_options(question: str, expected: dict[str, str]) -> None:
    assert mmk12_options(question) == expected
    assert list(mmk12_options(question)) == list(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Which? A. 1 B. 2 C. 3 D. 4", {"A": "1", "B": "2", "C": "3", "D": "4"}),
        ("Which?\nA：红\nB：蓝", {"A": "红", "B": "蓝"}),
        ("Pick (A) x (B) y", {"A": "x", "B": "y"}),
        ("Solve for x.", {}),
        ("Plan A. is fine", {}),  # one stray marker is not a choice list
        ("B. 1 C. 2", {}),  # must start at A
    ],
)
def test_inline_options(text: str, expected: dict[str, str]) -> None:
    assert inline_options(text) == expected
