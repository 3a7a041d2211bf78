"""The built-in task of the embedded default (``omni_data.builtin``): its rows, and the same rows as files."""

from __future__ import annotations

import re
from pathlib import Path

from omni_data.builtin import ANY_NUMBER, builtin_rows, write_builtin_task


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


def test_the_rows_data_source_is_the_one_the_builtin_scorer_is_registered_for() -> None:
    """omni-data and omni-rewards are independent: they meet on the data source's name, as a
    converter's rows meet their scorer."""
    from omni_rewards import SCORERS
    from omni_rewards.scorers import builtin_digits

    assert {row["data_source"] for row in builtin_rows(8)} == {builtin_digits.DATA_SOURCE}
    assert builtin_digits.DATA_SOURCE in SCORERS


def test_the_files_hold_the_rows_the_local_engine_trains_on(tmp_path: Path) -> None:
    """verl reads the built-in task from parquet: the same questions, truths and media, from the
    same seeds (training from the seed, validation from the seed + 1)."""
    import io

    import pyarrow.parquet as pq
    from PIL import Image

    train, val = write_builtin_task(tmp_path, train_rows=6, val_rows=3, seed=5)
    for path, rows in ((train, builtin_rows(6, seed=5)), (val, builtin_rows(3, seed=6))):
        table = pq.read_table(path).to_pylist()
        assert len(table) == len(rows)
        for written, row in zip(table, rows, strict=True):
            question = row["messages"][0]["content"][-1]["text"]
            assert written["prompt"][0]["content"] == f"<image><audio>{question}"
            assert written["reward_model"]["ground_truth"] == row["ground_truth"]
            picture = Image.open(io.BytesIO(written["images"][0]["bytes"]))
            assert picture.getpixel((0, 0)) == row["images"][0].getpixel((0, 0))
    assert write_builtin_task(tmp_path, train_rows=6, val_rows=3, seed=5) == (train, val)  # written once
