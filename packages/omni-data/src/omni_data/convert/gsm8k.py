"""GSM8K → RL parquet.

Input: a directory holding GSM8K as parquet or JSONL, one file (or shard set) per split,
named after the split (``train.parquet``, ``test.jsonl``, ``main/train-00000-of-00001.parquet``).
Each record has ``question`` and ``answer``; the answer ends with ``#### <number>``.
Output: ``<output-dir>/<split>.parquet``; ground truth is the number after ``####``
(thousands separators removed).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from omni_data.convert.report import ConversionReport
from omni_data.convert.sources import find_split_files, read_records
from omni_data.schema import rl_row, write_rl_parquet

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
FINAL_ANSWER = re.compile(r"####\s*(-?[\d,]*\.?\d+)\s*$")

DROP_EMPTY_QUESTION = "empty_question"
DROP_NO_FINAL_ANSWER = "no_final_answer"


def final_answer(answer: str) -> str | None:
    """The number after ``####`` with commas removed, or None when there is none."""
    match = FINAL_ANSWER.search(answer.strip())
    return match.group(1).replace(",", "") if match else None


def convert_record(record: dict[str, Any], split: str, index: int) -> tuple[dict[str, Any] | None, str]:
    """One GSM8K record to an RL row, or ``(None, reason)`` when it is dropped."""
    question = str(record.get("question") or "").strip()
    if not question:
        return None, DROP_EMPTY_QUESTION
    answer = str(record.get("answer") or "")
    truth = final_answer(answer)
    if truth is None:
        return None, DROP_NO_FINAL_ANSWER
    row = rl_row(
        data_source=DATA_SOURCE,
        messages=[{"role": "user", "content": f"{question} {INSTRUCTION}"}],
        ground_truth=truth,
        ability="math",
        extra_info={"split": split, "index": index, "question": question, "answer": answer},
    )
    return row, ""


def convert(input_dir: Path, output_dir: Path) -> ConversionReport:
    report = ConversionReport("gsm8k")
    for split, files in find_split_files(input_dir, (".parquet", ".jsonl")).items():
        rows = []
        counts = report.split(split)
        for index, record in enumerate(read_records(files, required=("question", "answer"))):
            row, reason = convert_record(record, split, index)
            if row is None:
                counts.drop(reason)
            else:
                counts.keep()
                rows.append(row)
        report.outputs[split] = str(write_rl_parquet(rows, output_dir / f"{split}.parquet"))
    return report
