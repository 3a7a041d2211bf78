from __future__ import annotations

import pytest

from omni_data.convert.options import parse_inline_options, parse_option_lines


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
def test_parse_inline_options(text: str, expected: dict[str, str]) -> None:
    assert parse_inline_options(text) == expected


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["A. cat", "B. dog"], {"A": "cat", "B": "dog"}),
        (["A) cat", "B) dog", "C) cow"], {"A": "cat", "B": "dog", "C": "cow"}),
        (["A. cat"], None),  # fewer than two
        (["A. cat", "C. dog"], None),  # out of order
        (["A. cat", "B. "], None),  # empty text
        ("A. cat B. dog", None),  # not a list
        (["A. cat", 3], None),
    ],
)
def test_parse_option_lines(lines: object, expected: dict[str, str] | None) -> None:
    assert parse_option_lines(lines) == expected
