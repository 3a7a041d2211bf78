"""MMK12 → RL parquet (image → text, K12 math).

Input: a directory of ``train-*.parquet`` / ``test-*.parquet`` shards with columns ``id``,
``question``, ``answer``, ``subject`` and ``image`` (``{"bytes": ..., "path": ...}``).
Output: ``<output-dir>/<split>.parquet``. The image bytes are carried inline, unchanged, so
the output parquet is self-contained. Options found in the question (``A. ... B. ...``) go
to ``extra_info["options"]`` as JSON. Images PIL cannot identify are dropped
(``unreadable_image``); ``--decode-images`` also decodes every pixel, which is slower and
catches truncated files.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

from omni_data.convert.options import parse_inline_options
from omni_data.convert.report import ConversionReport
from omni_data.convert.sources import find_split_files, read_records
from omni_data.schema import rl_row, write_rl_parquet

DATA_SOURCE = "mmk12"
SYSTEM_PROMPT = (
    "You are a careful math tutor. First reason step by step inside <think> </think>. "
    "Then give the final answer inside <answer> </answer>, with the answer itself in "
    "\\boxed{}, for example <answer>The answer is \\boxed{42}.</answer>"
)
COLUMNS = ("id", "question", "answer", "subject", "image")

DROP_EMPTY_QUESTION = "empty_question"
DROP_EMPTY_ANSWER = "empty_answer"
DROP_MISSING_IMAGE = "missing_image"
DROP_UNREADABLE_IMAGE = "unreadable_image"

_CHOICE = re.compile(r"^[A-H](?:\s*[,，、]?\s*[A-H])*$")
_INTEGER = re.compile(r"^[-+]?\d+$")
_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:\s*/\s*\d+)?%?$")


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


def convert_record(
    record: dict[str, Any], split: str, index: int, *, full_decode: bool
) -> tuple[dict[str, Any] | None, str]:
    """One MMK12 record to an RL row, or ``(None, reason)`` when it is dropped."""
    question = str(record.get("question") or "").strip()
    if not question:
        return None, DROP_EMPTY_QUESTION
    answer = str(record.get("answer") or "").strip()
    if not answer:
        return None, DROP_EMPTY_ANSWER
    image = record.get("image")
    if not isinstance(image, dict) or not isinstance(image.get("bytes"), bytes) or not image["bytes"]:
        return None, DROP_MISSING_IMAGE
    data: bytes = image["bytes"]
    if not image_is_readable(data, full_decode=full_decode):
        return None, DROP_UNREADABLE_IMAGE
    options = parse_inline_options(question)
    row = rl_row(
        data_source=DATA_SOURCE,
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"<image>{question}"},
        ],
        ground_truth=answer,
        ability="math",
        images=[{"bytes": data, "path": image.get("path")}],
        extra_info={
            "split": split,
            "index": index,
            "id": str(record.get("id", "")),
            "subject": str(record.get("subject") or ""),
            "question": question,
            "answer": answer,
            "answer_type": answer_type(answer),
            "options": json.dumps(options, ensure_ascii=False),
        },
    )
    return row, ""


def convert(input_dir: Path, output_dir: Path, *, full_decode: bool = False) -> ConversionReport:
    report = ConversionReport("mmk12")
    for split, files in find_split_files(input_dir, (".parquet",)).items():
        rows = []
        counts = report.split(split)
        for index, record in enumerate(read_records(files, required=COLUMNS)):
            row, reason = convert_record(record, split, index, full_decode=full_decode)
            if row is None:
                counts.drop(reason)
                continue
            counts.keep()
            counts.tally("answer_type", row["extra_info"]["answer_type"])
            rows.append(row)
        report.outputs[split] = str(write_rl_parquet(rows, output_dir / f"{split}.parquet"))
    return report
