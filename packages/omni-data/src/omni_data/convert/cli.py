"""Command line for the converters.

``python -m omni_data.convert gsm8k --input DIR --output-dir DIR [--config main|socratic]``
``python -m omni_data.convert mmk12 --input DIR --output-dir DIR [--decode-images] [--inline-options]``
``python -m omni_data.convert avqa  --input DIR --output-dir DIR [--strict-split] [--normalize-labels]``
``python -m omni_data.convert omni_preference --input DIR --output-dir DIR [--modalities image video audio]
[--test-ratio 0.1] [--seed 42] [--max-samples -1]`` (also with the spellings of verl-omni's script:
``--dataset_root``, ``--output_dir``, ``--test_ratio``, ``--max_samples``)

Each writes ``<output-dir>/<split>.parquet`` (omni_preference: preference pairs for offline
DPO in ``<output-dir>/<modality>/<split>.parquet``) and prints kept/dropped counts per
split and per drop reason. By default the rows are the ones verl-omni's converters (verl's,
for gsm8k) write, prompt for prompt; every flag of gsm8k, mmk12 and avqa above but
``--config`` is a documented, deliberate difference (omni_preference's are verl-omni's
own). ``main(argv)`` returns the exit status, so an app can mount it in
its own CLI.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from omni_data.convert import avqa, gsm8k, mmk12, omni_preference
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
        ("omni_preference", "Omni-Preference (Omni-RRM) release: preference pairs for offline DPO"),
    ):
        sub = recipes.add_parser(name, help=help_text)
        # omni_preference also takes the spellings of verl-omni's script.
        verl_spelling = name == "omni_preference"
        sub.add_argument("--input", *(("--dataset_root",) if verl_spelling else ()), dest="input", type=Path,
                         required=True, help="directory with the raw files")
        sub.add_argument("--output-dir", *(("--output_dir",) if verl_spelling else ()), dest="output_dir",
                         type=Path, required=True, help="where <split>.parquet goes")
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
        if name == "omni_preference":
            sub.add_argument(
                "--modalities",
                nargs="+",
                choices=omni_preference.MODALITIES,
                default=list(omni_preference.MODALITIES),
                help="modalities to convert, each to <output-dir>/<modality>/{train,test}.parquet (default: all)",
            )
            sub.add_argument(
                "--test-ratio",
                "--test_ratio",
                dest="test_ratio",
                type=_ratio,
                default=0.1,
                help="share of pairs for test, whole media files at a time (default 0.1)",
            )
            sub.add_argument("--seed", type=int, default=42, help="seed of the split (default 42)")
            sub.add_argument(
                "--max-samples",
                "--max_samples",
                dest="max_samples",
                type=int,
                default=-1,
                help="read only the first N records per modality, for a quick try (default: all)",
            )
    return parser


def _ratio(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, got {text}")
    return value


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
    if args.recipe == "omni_preference":
        return omni_preference.convert(
            args.input,
            args.output_dir,
            modalities=args.modalities,
            test_ratio=args.test_ratio,
            seed=args.seed,
            max_samples=args.max_samples,
        )
    raise ValueError(f"Unknown recipe {args.recipe!r}; choose gsm8k, mmk12, avqa or omni_preference.")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = run(args)
    except InputFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.format())
    return 0
