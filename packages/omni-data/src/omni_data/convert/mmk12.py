"""MMK12 → RL parquet (image → text, K12 math), as verl-omni's converter writes it.

Input: a directory of ``train-*.parquet`` / ``test-*.parquet`` shards with columns ``id``,
``question``, ``answer``, ``subject`` and ``image`` (``{"bytes": ..., "path": ...}`` or
bare bytes). Output: ``<output-dir>/<split>.parquet``, row for row what verl-omni a1139baf's
``examples/gspo_trainer/data_process/mmk12.py`` writes (its prompt, ``ability``,
``extra_info``; ``index`` counts kept rows, as its filter-then-map does), so runs compare
with its reports:

- ``prompt``: one user message, ``"<image>\\n{INSTRUCTION}\\n\\n{question}"``;
- ``images``: ``[{"bytes": ...}]``, the source bytes unchanged (the parquet is self-contained);
- ``reward_model.ground_truth``: the answer as written (stripped);
- ``extra_info``: ``split``, ``index``, ``id``, ``dataset``, ``subject``, ``raw_question``,
  ``raw_answer`` and ``options`` (JSON of the options written one per line, which MMK12's
  reward reads).

Rows are dropped, counted per reason, when the question or answer is empty, the image has no
bytes, or PIL cannot identify the image. Deliberate differences, each off by default:
``--decode-images`` also decodes every pixel (catches truncated files);
``--inline-options`` also finds options written on one line (``A. 1 B. 2``), which changes
``extra_info["options"]`` and so the option-text part of MMK12's reward.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

from omni_data.convert.options import inline_options, mmk12_options
from omni_data.convert.report import ConversionReport
from omni_data.convert.sources import find_split_files, read_records
from omni_data.schema import rl_row, write_rl_parquet

DATA_SOURCE = "mmk12"
ABILITY = "math_vl"
DATASET_NAME = "MMK12"
# verl-omni's instruction (after MM-Eureka's, with \boxed{}), character for character.
INSTRUCTION = (
    "You should first think about the reasoning process in the mind and then provide the user with the "
    "answer. The final answer must be wrapped using the \\boxed{} command. The reasoning process and answer "
    "are enclosed within <think></think> and <answer></answer> tags, respectively, i.e., "
    "<think>Since $1+1=2$, so the answer is $2$.</think><answer>$\\boxed{2}$</answer>, which means your "
    "output should start with <think> and end with </answer>."
)
COLUMNS = ("id", "question", "answer", "subject", "image")

DROP_EMPTY_QUESTION = "empty_question"
DROP_EMPTY_ANSWER = "empty_answer"
DROP_MISSING_IMAGE = "missing_image"
DROP_UNREADABLE_IMAGE = "unreadable_image"

_CHOICE = re.compile(r"^[A-H](?:\s*[,，、]?\s*[A-H])*$")
_INTEGER = re.compile(r"^[-+]?\d+$")
_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:\s*/\s*\d+)?%?$")


def user_prompt(question: str) -> str:
    return f"<image>\n{INSTRUCTION}\n\n{question}"


def answer_type(answer: str) -> str:
    """``choice`` (letters), ``integer``, ``number`` (decimal/fraction/percent) or ``expression``."""
    text = answer.strip().replace("$", "")
    if _CHOICE.match(text):
        return "choice"
    if _INTEGER.match(text):
        return "integer"
    if _NUMBER.match(text):
        return "number"
    return "expression"


def image_is_readable(data: bytes, *, full_decode: bool) -> bool:
    """Whether PIL can identify (or, with ``full_decode``, fully decode) the image bytes."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            if full_decode:
                image.load()
            else:
                image.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        return False
    return True


def image_bytes(field: object) -> bytes | None:
    """The image's bytes: a ``{"bytes": ...}`` dict or bare bytes; None when there are none."""
    data = field.get("bytes") if isinstance(field, dict) else field
    return bytes(data) if isinstance(data, (bytes, bytearray)) and data else None


def convert_record(
    record: dict[str, Any], split: str, index: int, *, full_decode: bool, find_inline_options: bool = False
) -> tuple[dict[str, Any] | None, str]:
    """One MMK12 record to an RL row (``index``: its place among the kept rows), or
    ``(None, reason)`` when it is dropped."""
    question = str(record.get("question") or "").strip()
    if not question:
        return None, DROP_EMPTY_QUESTION
    answer = str(record.get("answer") or "").strip()
    if not answer:
        return None, DROP_EMPTY_ANSWER
    data = image_bytes(record.get("image"))
    if data is None:
        return None, DROP_MISSING_IMAGE
    if not image_is_readable(data, full_decode=full_decode):
        return None, DROP_UNREADABLE_IMAGE
    options = (inline_options(question) or mmk12_options(question)) if find_inline_options else mmk12_options(question)
    row = rl_row(
        data_source=DATA_SOURCE,
        messages=[{"role": "user", "content": user_prompt(question)}],
        ground_truth=answer,
        ability=ABILITY,
        images=[{"bytes": data}],
        extra_info={
            "split": split,
            "index": index,
            "id": str(record.get("id") or ""),
            "dataset": DATASET_NAME,
            "subject": str(record.get("subject") or ""),
            "raw_question": question,
            "raw_answer": answer,
            "options": json.dumps(options, ensure_ascii=False),
        },
    )
    return row, ""


def convert(
    input_dir: Path, output_dir: Path, *, full_decode: bool = False, find_inline_options: bool = False
) -> ConversionReport:
    report = ConversionReport("mmk12")
    for split, files in find_split_files(input_dir, (".parquet",)).items():
        rows: list[dict[str, Any]] = []
        counts = report.split(split)
        for record in read_records(files, required=COLUMNS):
            row, reason = convert_record(
                record, split, len(rows), full_decode=full_decode, find_inline_options=find_inline_options
            )
            if row is None:
                counts.drop(reason)
                continue
            counts.keep()
            counts.tally("answer_type", answer_type(row["reward_model"]["ground_truth"]))
            rows.append(row)
        report.outputs[split] = str(write_rl_parquet(rows, output_dir / f"{split}.parquet"))
    return report
