"""``uv run trainer``: the command-line entry point.

The training engines are not built yet; today the command lists the installed model
adapters and says plainly that it cannot train, instead of pretending to.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from omni_contracts import ModelPackageImportError, ModelPackageLoader, rollout_adapters, training_adapters

DESCRIPTION = """\
RL post-training for omni-modal models (GSPO/GRPO-style) on Qwen3-Omni and friends.

Coming next: `uv run trainer` will train a tiny Qwen3-Omni, built offline, on a built-in
task with the local engine (one process, CPU or one GPU), and
`uv run trainer key=value ...` will take verl-style overrides such as
data.train_files=..., actor_rollout_ref.model.path=...,
actor_rollout_ref.actor.policy_loss.loss_mode=gspo, algorithm.adv_estimator=grpo,
trainer.engine=verl. Neither engine exists yet: the command only lists model packages.
"""

NOT_YET = (
    "trainer: training is not available yet — the local and verl engines are still being "
    "built. Nothing was trained. `trainer --list-models` shows the installed model adapters."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainer", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value", help="config overrides (not accepted yet)"
    )
    parser.add_argument(
        "--list-models",
        action="store_true",
        help="import the installed model packages and list their registered adapters",
    )
    return parser


def list_models(loader: ModelPackageLoader) -> int:
    installed = loader.installed()
    print(f"Model packages (entry-point group '{loader.group}'):")
    for package in installed:
        print(f"  {package.describe()}")
    if not installed:
        print("  none installed")
    try:
        loader.load_all()
    except ModelPackageImportError as exc:
        print(exc, file=sys.stderr)
        return 1
    print("Training adapters:")
    for architecture, stage in sorted(training_adapters.keys()) or [("none", "")]:
        print(f"  {architecture} {stage}".rstrip())
    print("Rollout pipelines:")
    for pipeline in sorted(rollout_adapters.keys()) or ["none"]:
        print(f"  {pipeline}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list_models:
        return list_models(training_adapters.loader)
    print(NOT_YET, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
