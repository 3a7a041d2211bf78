"""Command line for the converters.

``python -m omni_data.convert gsm8k --input DIR --output-dir DIR [--config main|socratic]``
``python -m omni_data.convert mmk12 --input DIR --output-dir DIR [--decode-images] [--inline-options]``
``python -m omni_data.convert avqa  --input DIR --output-dir DIR [--strict-split] [--normalize-labels]``

Each writes ``<output-dir>/<split>.parquet`` and prints kept/dropped counts per split and
per drop reason. By default the rows are the ones verl-omni's converters (verl's, for
gsm8k) write, prompt for prompt; every flag above but ``--config`` is a documented,
deliberate difference. ``main(argv)`` returns the exit status, so an app can mount it in
its own CLI.
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
        ("avqa", "AVQA-R1-6K: the AVQA_R1 release directory, or one <split>.json list per split"),
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
                default=False,
                help="drop train rows whose image or audio content also appears in another split "
                "(off by default, as verl-omni keeps them; results then differ from its reports)",
            )
            sub.add_argument(
                "--normalize-labels",
                action="store_true",
                help="write ground truths as <answer>X</answer> with the letter upper-cased (default: "
                "as written, as verl-omni does; its choice reward is case-sensitive)",
            )
        if name == "mmk12":
            sub.add_argument(
                "--decode-images",
                action="store_true",
                help="fully decode every image (slower; also catches truncated files)",
            )
            sub.add_argument(
                "--inline-options",
                action="store_true",
                help="also read options written on one line (A. 1 B. 2) into extra_info.options "
                "(default: one option per line, as verl-omni; changes MMK12's option-text reward)",
            )
    return parser


def run(args: argparse.Namespace) -> ConversionReport:
    if args.recipe == "gsm8k":
        return gsm8k.convert(args.input, args.output_dir, config=args.config)
    if args.recipe == "mmk12":
        return mmk12.convert(
            args.input, args.output_dir, full_decode=args.decode_images, find_inline_options=args.inline_options
        )
    if args.recipe == "avqa":
        return avqa.convert(
            args.input, args.output_dir, strict_split=args.strict_split, normalize_labels=args.normalize_labels
        )
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
