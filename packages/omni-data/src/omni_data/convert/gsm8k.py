"""GSM8K → RL parquet.

Input, either layout as users have it:

- OpenAI's ``grade-school-math`` data directory: ``train.jsonl``, ``test.jsonl`` (the
  ``main`` config), ``train_socratic.jsonl``, ``test_socratic.jsonl`` (``socratic``), and
  ``example_model_solutions.jsonl`` (not a split: skipped).
- Hugging Face's ``openai/gsm8k``: ``main/`` and ``socratic/`` folders of
  ``train-00000-of-00001.parquet``-style shards.

Only the chosen config is converted (``main`` by default; ``config="socratic"`` /
``--config socratic`` when asked); files of the other config and files that are not GSM8K
splits are listed as skipped in the report. One split found in two places (say
``train.jsonl`` and ``main/train-*.parquet``) is an error rather than a merge with
duplicates. Each record has ``question`` and ``answer``; the answer ends with ``#### <number>``.
Output: ``<output-dir>/<split>.parquet``, row for row what verl's
``examples/data_preprocess/gsm8k.py`` writes (verl-omni's gsm8k recipe uses it): the question
as given, a space and verl's instruction as the one user message; ground truth the number
after the first ``#### `` (thousands separators removed); ``extra_info`` = ``split``,
``index``, ``answer``, ``question``. Where verl's converter stops with an assertion (no
``#### <number>``) or writes a row with no question, the row is dropped and counted.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from omni_data.convert.report import ConversionReport
from omni_data.convert.sources import read_records
from omni_data.errors import InputFormatError
from omni_data.schema import rl_row, write_rl_parquet

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
# verl's extract_solution: the first "#### " followed by digits, dots and commas.
FINAL_ANSWER = re.compile(r"#### (-?[0-9.,]+)")

Gsm8kConfig = Literal["main", "socratic"]
CONFIGS: tuple[Gsm8kConfig, ...] = ("main", "socratic")
SPLITS = ("train", "test")

# "train.jsonl", "test_socratic.jsonl", "train-00000-of-00002.parquet"
_SPLIT_FILE = re.compile(
    r"^(?P<split>train|test)(?P<socratic>_socratic)?(?:-\d+-of-\d+)?\.(?:parquet|jsonl)$"
)

DROP_EMPTY_QUESTION = "empty_question"
DROP_NO_FINAL_ANSWER = "no_final_answer"


def final_answer(answer: str) -> str | None:
    """The number after the first ``#### `` with commas removed, or None when there is none."""
    match = FINAL_ANSWER.search(answer)
    return match.group(1).replace(",", "") if match else None


def convert_record(record: dict[str, Any], split: str, index: int) -> tuple[dict[str, Any] | None, str]:
    """One GSM8K record to an RL row, or ``(None, reason)`` when it is dropped."""
    question = str(record.get("question") or "")  # as given: verl does not strip it
    if not question.strip():
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
        extra_info={"split": split, "index": index, "answer": answer, "question": question},
    )
    return row, ""


def find_gsm8k_files(
    input_dir: Path, config: Gsm8kConfig = "main"
) -> tuple[dict[str, list[Path]], dict[str, str]]:
    """The files of each split of ``config`` under ``input_dir``, and the files skipped
    (relative path → why). Hidden files and folders are ignored.

    Raises:
        InputFormatError: no such directory; no split of ``config`` in it; or one split in
            more than one place (files in different folders or formats).
    """
    if config not in CONFIGS:
        raise InputFormatError(f"Unknown GSM8K config {config!r}; choose one of {', '.join(CONFIGS)}.")
    if not input_dir.is_dir():
        raise InputFormatError(f"Input directory {input_dir} does not exist or is not a directory.")
    sources: dict[str, dict[tuple[Path, str], list[Path]]] = {}
    skipped: dict[str, str] = {}
    for path in sorted(input_dir.rglob("*")):
        relative = path.relative_to(input_dir)
        if not path.is_file() or any(part.startswith(".") for part in relative.parts):
            continue
        match = _SPLIT_FILE.match(path.name)
        if match is None:
            skipped[str(relative)] = "not a GSM8K split file"
            continue
        folder_configs = [part for part in relative.parts[:-1] if part in CONFIGS]
        named = "socratic" if match.group("socratic") else None
        if named and folder_configs and folder_configs[-1] != named:
            skipped[str(relative)] = f"a {named} file in a {folder_configs[-1]} folder"
            continue
        file_config = named or (folder_configs[-1] if folder_configs else "main")
        if file_config != config:
            skipped[str(relative)] = f"{file_config} config (convert it with --config {file_config})"
            continue
        source = (path.parent, path.suffix)
        sources.setdefault(match.group("split"), {}).setdefault(source, []).append(path)
    if not sources:
        raise InputFormatError(
            f"No GSM8K {config} split files under {input_dir}; expected train.jsonl and "
            "test.jsonl (OpenAI's grade-school-math data directory) or main/train-*.parquet "
            "and main/test-*.parquet (Hugging Face's openai/gsm8k)"
            + (f"; skipped {len(skipped)} other file(s)." if skipped else ".")
        )
    files: dict[str, list[Path]] = {}
    for split in sorted(sources):
        places = sources[split]
        if len(places) > 1:
            listed = "; ".join(", ".join(str(p) for p in paths) for paths in places.values())
            raise InputFormatError(
                f"The GSM8K {config} {split} split is in {len(places)} places ({listed}); "
                "converting them all would duplicate every question. Point --input at one copy."
            )
        [files[split]] = places.values()
    return files, skipped


def convert(input_dir: Path, output_dir: Path, *, config: Gsm8kConfig = "main") -> ConversionReport:
    """Convert the ``config`` splits found under ``input_dir``; see the module docstring."""
    files_by_split, skipped = find_gsm8k_files(input_dir, config)
    report = ConversionReport("gsm8k")
    report.skipped.update(skipped)
    for split, files in files_by_split.items():
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
