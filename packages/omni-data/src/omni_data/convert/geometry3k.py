"""Geometry3K → RL parquet (image → text, geometry), as verl-omni's converter writes it.

Input: the ``hiyouga/geometry3k`` dataset repository as downloaded for offline use
(``huggingface-cli download hiyouga/geometry3k --repo-type dataset --local-dir DIR``, or its
snapshot in the hub cache): ``data/train-00000-of-00001.parquet`` (2,101 rows),
``data/validation-00000-of-00001.parquet`` (300) and ``data/test-00000-of-00001.parquet``
(601); shards of one split are read in name order. Columns read: ``images`` (a list of
``{"bytes", "path"}``; one diagram per row), ``problem`` (the question, with one ``<image>``
per image: ``"<image>Find x. Round to the nearest tenth, if necessary."``) and ``answer``
(a number such as ``"3"`` or a LaTeX expression). The current revision also carries ``id``,
``choices`` and ``ground_truth``; like verl-omni we do not read them. The ``datasets``
library's own cache (Arrow files) and the ``refs/convert/parquet`` branch
(``default/train/0000.parquet``) are not this layout; two copies of one shard (say, two
snapshots under one hub-cache folder) are refused rather than read twice.

Output: ``<output-dir>/<split>.parquet``, row for row what verl-omni 203c2c5c's
``examples/gspo_trainer/data_process/geo3k.py`` (``build_rl_row``) writes:

- ``prompt``: its system prompt, then one user message ``f"{problem} {FORMAT_INSTRUCTION}"``
  with the problem exactly as written (its ``<image>`` placeholders included, whitespace kept);
- ``images``: the source ``{"bytes", "path"}`` entries unchanged (verl-omni turns image
  decoding off so the parquet keeps the source bytes);
- ``data_source`` ``hiyouga/geometry3k`` (verl's key for its geo3k reward), ``ability`` ``math``;
- ``reward_model.ground_truth`` and ``extra_info.answer``: the answer, stripped;
- ``extra_info``: ``split``, ``index`` (the row's place in its source split, counted over
  the split's shards) and ``question`` (the problem as written).

Rows are dropped, counted per reason, where verl-omni raises and stops: ``empty_problem``
(blank or missing), ``empty_answer``, ``no_images`` (missing or empty list) and
``placeholder_mismatch`` (``<image>`` count differs from the image count). Two more reasons
are ours, for rows it would write but that cannot train: ``image_without_bytes`` (an entry
that only names a path, which would not resolve after conversion) and ``unreadable_image``
(PIL cannot identify the bytes; ``full_decode``, ``--decode-images``, also decodes every
pixel and so catches truncated files).

Deliberate differences:

- A bad row is dropped and counted rather than aborting the whole conversion; ``index``
  keeps numbering source rows, so each kept row is the one verl-omni writes for that source
  row, whatever was dropped before it.
- A missing (null) problem or answer is empty; verl-omni's ``str()`` would write ``"None"``.
- ``validation`` is converted too, to ``validation.parquet``. verl-omni converts only train
  and test, yet its separate-async launcher asks for a ``validation.parquet``; train and
  test are unchanged by it. Parquet files of any other split are skipped (reported).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from omni_data.convert.mmk12 import image_is_readable
from omni_data.convert.report import ConversionReport, SplitReport
from omni_data.convert.sources import find_split_files, read_records
from omni_data.errors import InputFormatError
from omni_data.schema import PLACEHOLDERS, rl_row, write_rl_parquet

DATA_SOURCE = "hiyouga/geometry3k"
ABILITY = "math"
# verl-omni's prompts, character for character (its backslashes are literal: ``\boxed{}``).
SYSTEM_PROMPT = (
    "You are a geometry reasoning assistant. Start every response with the literal tag <think>. "
    "Put all reasoning between <think> and </think>. Immediately after </think>, give only the final answer in "
    '\\boxed{}. Do not write any text or whitespace before <think>. Do not write labels such as "Your reasoning"; '
    "output the tags themselves.\n\n"
    'A valid response to the question "What is 1+1?" is exactly:\n'
    "<think>1+1=2.</think>\\boxed{2}"
    "\n\nThe opening <think> tag is mandatory. Beginning directly with reasoning and later writing only </think> "
    "is invalid."
)
FORMAT_INSTRUCTION = (
    "Your first output characters must be <think>. Enclose the reasoning in <think> and </think>, then "
    "immediately output the final answer in \\boxed{}. Output the literal tags, not a description of them. "
    "An implicit opening is invalid: you must explicitly write <think> before the first reasoning word."
)
COLUMNS = ("images", "problem", "answer")
SPLITS = ("train", "validation", "test")
REQUIRED_SPLITS = ("train", "test")
IMAGE_PLACEHOLDER = PLACEHOLDERS["image"]

DROP_EMPTY_PROBLEM = "empty_problem"
DROP_EMPTY_ANSWER = "empty_answer"
DROP_NO_IMAGES = "no_images"
DROP_PLACEHOLDER_MISMATCH = "placeholder_mismatch"
DROP_IMAGE_WITHOUT_BYTES = "image_without_bytes"
DROP_UNREADABLE_IMAGE = "unreadable_image"


def user_prompt(problem: str) -> str:
    return f"{problem} {FORMAT_INSTRUCTION}"


def source_images(field: object) -> list[dict[str, Any]] | None:
    """The row's images as ``{"bytes", "path"}`` entries; None when one has no bytes."""
    images: list[dict[str, Any]] = []
    for entry in field if isinstance(field, list) else []:
        data = entry.get("bytes") if isinstance(entry, dict) else None
        if not isinstance(data, (bytes, bytearray)) or not data:
            return None
        images.append({"bytes": bytes(data), "path": entry.get("path")})
    return images


def check_record(record: dict[str, Any], *, full_decode: bool) -> str:
    """Why the record cannot be converted, or ``""`` when it can (verl-omni's checks first)."""
    problem = record.get("problem")
    if problem is None or not str(problem).strip():
        return DROP_EMPTY_PROBLEM
    answer = record.get("answer")
    if answer is None or not str(answer).strip():
        return DROP_EMPTY_ANSWER
    raw_images = record.get("images")
    if not isinstance(raw_images, list) or not raw_images:
        return DROP_NO_IMAGES
    if str(problem).count(IMAGE_PLACEHOLDER) != len(raw_images):
        return DROP_PLACEHOLDER_MISMATCH
    images = source_images(raw_images)
    if images is None:
        return DROP_IMAGE_WITHOUT_BYTES
    if not all(image_is_readable(image["bytes"], full_decode=full_decode) for image in images):
        return DROP_UNREADABLE_IMAGE
    return ""


def convert_record(
    record: dict[str, Any], split: str, index: int, *, full_decode: bool = False
) -> tuple[dict[str, Any] | None, str]:
    """One Geometry3K record to an RL row (``index``: its place in the source split), or
    ``(None, reason)`` when it is dropped."""
    reason = check_record(record, full_decode=full_decode)
    if reason:
        return None, reason
    problem = str(record["problem"])
    answer = str(record["answer"]).strip()
    row = rl_row(
        data_source=DATA_SOURCE,
        messages=[
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": user_prompt(problem)},
        ],
        ground_truth=answer,
        ability=ABILITY,
        images=source_images(record["images"]),
        extra_info={"split": split, "index": index, "answer": answer, "question": problem},
    )
    return row, ""


def find_splits(input_dir: Path, report: ConversionReport) -> dict[str, list[Path]]:
    """The shards of each Geometry3K split; other parquet files go to ``report.skipped``.

    Raises:
        InputFormatError: no such directory, no parquet shards, no train or test split, or
            one shard name found twice.
    """
    found = find_split_files(input_dir, (".parquet",))
    for files in found.values():
        names = Counter(path.name for path in files)
        twice = sorted(str(path.relative_to(input_dir)) for path in files if names[path.name] > 1)
        if twice:
            raise InputFormatError(
                f"{', '.join(twice)}: the same shard in two places under {input_dir}; point --input at one copy "
                "of the release (e.g. one snapshots/<revision> folder)."
            )
    for split, files in found.items():
        if split not in SPLITS:
            report.skipped.update(
                {str(path.relative_to(input_dir)): "not a Geometry3K split (train, validation, test)" for path in files}
            )
    missing = [split for split in REQUIRED_SPLITS if split not in found]
    if missing:
        raise InputFormatError(
            f"No {' or '.join(missing)} shards under {input_dir} (found splits: {', '.join(found)}); "
            "expected the hiyouga/geometry3k layout, e.g. data/train-00000-of-00001.parquet."
        )
    return {split: found[split] for split in SPLITS if split in found}


def convert_split(split: str, files: list[Path], counts: SplitReport, *, full_decode: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for index, record in enumerate(read_records(files, required=COLUMNS)):
        row, reason = convert_record(record, split, index, full_decode=full_decode)
        if row is None:
            counts.drop(reason)
            continue
        counts.keep()
        rows.append(row)
    return rows


def convert(input_dir: Path, output_dir: Path, *, full_decode: bool = False) -> ConversionReport:
    report = ConversionReport("geometry3k")
    for split, files in find_splits(input_dir, report).items():
        rows = convert_split(split, files, report.split(split), full_decode=full_decode)
        report.outputs[split] = str(write_rl_parquet(rows, output_dir / f"{split}.parquet"))
    return report
