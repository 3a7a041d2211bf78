"""Command line for the converters.

``python -m omni_data.convert gsm8k --input DIR --output-dir DIR [--config main|socratic]``
``python -m omni_data.convert mmk12 --input DIR --output-dir DIR [--decode-images] [--inline-options]``
``python -m omni_data.convert avqa  --input DIR --output-dir DIR [--strict-split] [--normalize-labels]``
``python -m omni_data.convert geometry3k --input DIR --output-dir DIR [--decode-images]``
``python -m omni_data.convert audiomcq --input-jsonl FILE --audio-root DIR --output-dir DIR [--validation-size 256]
[--seed 42]``
``python -m omni_data.convert nextqa --input DIR --output-dir DIR [--validation-ratio 0.05] [--fps 1.0] ...``
``python -m omni_data.convert avqa_video --train-json FILE --validation-json FILE --video-root DIR --output-dir DIR
[--fps 1.0] [--max-frames 32] [--overwrite]``
``python -m omni_data.convert omnivideo_qi --input FILE --output-dir DIR --path-map SOURCE=DEST [...]
[--no-audio-from-video] [--fps 2.0] [--max-frames 64] [--val-size 256]``
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

from omni_data.convert import (
    audiomcq,
    avqa,
    avqa_video,
    geometry3k,
    gsm8k,
    mmk12,
    nextqa,
    omni_preference,
    omnivideo_qi,
)
from omni_data.convert.report import ConversionReport
from omni_data.errors import InputFormatError


RECIPES = (
    "gsm8k", "mmk12", "avqa", "geometry3k", "audiomcq", "nextqa", "avqa_video", "omnivideo_qi", "omni_preference",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m omni_data.convert", description="Convert a raw dataset to RL parquet."
    )
    recipes = parser.add_subparsers(dest="recipe", required=True)
    for name, help_text in (
        ("gsm8k", "GSM8K: OpenAI's grade-school-math data dir, or HF main/ and socratic/ parquet"),
        ("mmk12", "MMK12 train-*/test-*.parquet shards with inline images"),
        ("avqa", "AVQA-R1-6K: the AVQA_R1 release directory, or one <split>.json list per split"),
        ("geometry3k", "Geometry3K (hiyouga/geometry3k): data/<split>-*.parquet shards with inline images"),
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
        if name in ("mmk12", "geometry3k"):
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
    audio_mcq = recipes.add_parser(
        "audiomcq", help="AudioMCQ: a JSONL of question/choices/answer/audio_path records, and their audio root"
    )
    # verl-omni's spelling; --input as the other recipes spell it
    audio_mcq.add_argument("--input-jsonl", "--input", dest="input", type=Path, required=True,
                           help="the JSONL file, one record per line")
    audio_mcq.add_argument("--audio-root", dest="audio_root", type=Path, required=True,
                           help="the directory the records' audio_path values are relative to")
    audio_mcq.add_argument("--output-dir", dest="output_dir", type=Path, required=True,
                           help="where train.parquet and validation.parquet go (existing ones are never overwritten)")
    audio_mcq.add_argument("--validation-size", dest="validation_size", type=_positive_int, default=256,
                           help="distinct audio files held out for validation, each with all its questions "
                           "(default 256)")
    audio_mcq.add_argument("--seed", type=int, default=42, help="seed of the split (default 42, as verl-omni)")
    nextqa_parser = recipes.add_parser(
        "nextqa", help="NExT-QA (TinyLLaVA-Video-R1): the directory with nextqa_0-30s.jsonl and the extracted NextQA/"
    )
    # verl-omni's spellings (--input_dir, --output_dir, ...) and ours
    nextqa_parser.add_argument("--input", "--input_dir", dest="input", type=Path, required=True,
                               help="the directory with the annotation JSONL and the extracted NextQA/ tree")
    nextqa_parser.add_argument("--output-dir", "--output_dir", dest="output_dir", type=Path, required=True,
                               help="where train.parquet and validation.parquet go")
    nextqa_parser.add_argument("--input-file", "--input_file", dest="input_file", default=nextqa.DEFAULT_INPUT_FILE,
                               help="the annotation JSONL, relative to --input (default nextqa_0-30s.jsonl)")
    nextqa_parser.add_argument("--validation-ratio", "--validation_ratio", dest="validation_ratio",
                               type=_validation_ratio, default=0.05,
                               help="share of distinct clips for validation, whole clips at a time "
                               "(default 0.05; 0 writes no validation.parquet)")
    nextqa_parser.add_argument("--seed", type=int, default=42, help="seed of the split (default 42, as verl-omni)")
    nextqa_parser.add_argument("--fps", type=float, default=1.0,
                               help="frames per second each video entry asks for (default 1.0)")
    nextqa_parser.add_argument("--min-pixels", "--min_pixels", dest="min_pixels", type=int, default=32 * 28 * 28,
                               help="least pixels per sampled frame (default 32 * 28 * 28)")
    nextqa_parser.add_argument("--max-pixels", "--max_pixels", dest="max_pixels", type=int, default=128 * 28 * 28,
                               help="most pixels per sampled frame (default 128 * 28 * 28)")
    nextqa_parser.add_argument("--max-frames", "--max_frames", dest="max_frames", type=int, default=32,
                               help="most sampled frames per video (default 32)")
    avqa_video_parser = recipes.add_parser(
        "avqa_video", help="AVQA on its original videos: train_qa.json, val_qa.json and the directory of <video_name>.mp4"
    )
    # verl-omni's spellings (--train_json, ...) and ours
    for flag, dest, what in (("--train-json", "train_json", "the release's train_qa.json"),
                             ("--validation-json", "validation_json", "the release's val_qa.json"),
                             ("--video-root", "video_root", "the directory of the <video_name>.mp4 clips"),
                             ("--output-dir", "output_dir", "where train.parquet, validation.parquet and manifest.json go")):
        avqa_video_parser.add_argument(flag, flag.replace("-", "_").replace("__", "--"), dest=dest, type=Path,
                                       required=True, help=what)
    avqa_video_parser.add_argument("--fps", type=float, default=1.0,
                                   help="frames per second each video entry asks for (default 1.0)")
    avqa_video_parser.add_argument("--max-frames", "--max_frames", dest="max_frames", type=_positive_int, default=32,
                                   help="most sampled frames per video (default 32)")
    avqa_video_parser.add_argument("--overwrite", action="store_true", help="replace the files of an earlier conversion")
    qi_parser = recipes.add_parser(
        "omnivideo_qi", help="OmniVideo-R1 QI: merged_train_all_qi.jsonl, its media found through --path-map"
    )
    qi_parser.add_argument("--input", dest="input", type=Path, required=True, help="the annotation JSONL")
    qi_parser.add_argument("--output-dir", "--output_dir", dest="output_dir", type=Path, required=True,
                           help="where train.parquet and validation.parquet go")
    qi_parser.add_argument("--path-map", "--path_map", dest="path_maps", action="append", type=_path_map,
                           required=True, metavar="SOURCE=DEST",
                           help="an annotation path prefix and the local directory it stands for; repeatable, the "
                           "longest matching prefix wins (e.g. ./data/LLaVA-Video-178K=/shared/LLaVA-Video-178K)")
    qi_parser.add_argument("--audio-from-video", "--audio_from_video", dest="audio_from_video",
                           action=argparse.BooleanOptionalAction, default=True,
                           help="hear each video's own soundtrack (train with data.use_audio_in_video=true; "
                           "default); --no-audio-from-video reads the annotation's extracted audio files instead")
    qi_parser.add_argument("--fps", type=float, default=2.0, help="frames per second each video entry asks for")
    qi_parser.add_argument("--max-frames", "--max_frames", dest="max_frames", type=int, default=64,
                           help="most sampled frames per video (default 64; at least 4)")
    qi_parser.add_argument("--max-samples", "--max_samples", dest="max_samples", type=int, default=0,
                           help="stop once this many rows are kept, for a quick try (default 0: all)")
    qi_parser.add_argument("--val-size", "--val_size", dest="val_size", type=_positive_int, default=256,
                           help="validation rows wanted, whole videos at a time (default 256)")
    qi_parser.add_argument("--seed", type=int, default=42, help="seed of the split (default 42, as verl-omni)")
    return parser


def _validation_ratio(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below 1, got {text}")
    return value


def _path_map(text: str) -> tuple[str, Path]:
    try:
        return omnivideo_qi.parse_path_map(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


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
    if args.recipe == "audiomcq":
        return audiomcq.convert(
            args.input, args.audio_root, args.output_dir, validation_size=args.validation_size, seed=args.seed
        )
    if args.recipe == "geometry3k":
        return geometry3k.convert(args.input, args.output_dir, full_decode=args.decode_images)
    if args.recipe == "omni_preference":
        return omni_preference.convert(
            args.input,
            args.output_dir,
            modalities=args.modalities,
            test_ratio=args.test_ratio,
            seed=args.seed,
            max_samples=args.max_samples,
        )
    if args.recipe == "nextqa":
        return nextqa.convert(
            args.input, args.output_dir, input_file=args.input_file, validation_ratio=args.validation_ratio,
            seed=args.seed, fps=args.fps, min_pixels=args.min_pixels, max_pixels=args.max_pixels,
            max_frames=args.max_frames,
        )
    if args.recipe == "avqa_video":
        return avqa_video.convert(args.train_json, args.validation_json, args.video_root, args.output_dir,
                                  fps=args.fps, max_frames=args.max_frames, overwrite=args.overwrite)
    if args.recipe == "omnivideo_qi":
        return omnivideo_qi.convert(
            args.input, args.output_dir, args.path_maps, audio_from_video=args.audio_from_video, fps=args.fps,
            max_frames=args.max_frames, max_samples=args.max_samples, val_size=args.val_size, seed=args.seed,
        )
    raise ValueError(f"Unknown recipe {args.recipe!r}; choose one of: {', '.join(RECIPES)}.")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = run(args)
    except (InputFormatError, FileExistsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.format())
    return 0
