"""Command line for the converters.

``python -m omni_data.convert gsm8k --input DIR --output-dir DIR [--config main|socratic]``
``python -m omni_data.convert mmk12 --input DIR --output-dir DIR [--decode-images]``
``python -m omni_data.convert avqa  --input DIR --output-dir DIR [--no-strict-split]``

Each writes ``<output-dir>/<split>.parquet`` and prints kept/dropped counts per split and
per drop reason. ``main(argv)`` returns the exit status, so an app can mount it in its own
CLI.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from omni_data.convert import avqa, gsm8k, mmk12
from omni_data.convert.report import ConversionReport
from omni_data.errors import InputFormatError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m omni_data.convert", description="Convert a raw dataset to RL parquet."
    )
    recipes = parser.add_subparsers(dest="recipe", required=True)
    for name, help_text in (
        ("gsm8k", "GSM8K: OpenAI's grade-school-math data dir, or HF main/ and socratic/ parquet"),
        ("mmk12", "MMK12 train-*/test-*.parquet shards with inline images"),
        ("avqa", "AVQA-R1-6K directory with one JSON list per split"),
    ):
        sub = recipes.add_parser(name, help=help_text)
        sub.add_argument("--input", type=Path, required=True, help="directory with the raw files")
        sub.add_argument("--output-dir", type=Path, required=True, help="where <split>.parquet goes")
        if name == "gsm8k":
            sub.add_argument(
                "--config",
                choices=gsm8k.CONFIGS,
                default="main",
                help="which GSM8K config to convert (default main; the other is skipped)",
            )
        if name == "avqa":
            sub.add_argument(
                "--strict-split",
                action=argparse.BooleanOptionalAction,
                default=True,
                help="drop train rows whose image or audio content also appears in another "
                "split (default on; --no-strict-split keeps them)",
            )
        if name == "mmk12":
            sub.add_argument(
                "--decode-images",
                action="store_true",
                help="fully decode every image (slower; also catches truncated files)",
            )
    return parser


def run(args: argparse.Namespace) -> ConversionReport:
    if args.recipe == "gsm8k":
        return gsm8k.convert(args.input, args.output_dir, config=args.config)
    if args.recipe == "mmk12":
        return mmk12.convert(args.input, args.output_dir, full_decode=args.decode_images)
    if args.recipe == "avqa":
        return avqa.convert(args.input, args.output_dir, strict_split=args.strict_split)
    raise ValueError(f"Unknown recipe {args.recipe!r}; choose gsm8k, mmk12 or avqa.")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = run(args)
    except InputFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.format())
    return 0
