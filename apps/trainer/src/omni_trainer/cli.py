"""``uv run trainer [key=value ...]``: train with the local engine (verl-style overrides).

With no arguments it runs the embedded default: a tiny Qwen3-Omni, built offline, learns
the built-in task on the CPU in minutes. ``--list-models`` shows the installed adapters.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from omni_contracts import ModelPackageImportError, ModelPackageLoader, rollout_adapters, training_adapters
from omni_trainer.subcommands import SUBCOMMANDS

DESCRIPTION = """\
RL post-training for omni-modal models (GSPO/GRPO-style) on Qwen3-Omni and friends.

  uv run trainer                      the embedded default: a tiny Qwen3-Omni built offline
                                      learns the built-in task on the CPU in a few minutes
  uv run trainer key=value ...        verl-style overrides, e.g.
      actor_rollout_ref.model.path=/models/Qwen3-Omni-30B-A3B-Instruct
      actor_rollout_ref.actor.policy_loss.loss_mode=gspo algorithm.adv_estimator=grpo
      actor_rollout_ref.rollout.n=8 trainer.total_training_steps=100

Other jobs: trainer convert | tiny | plan-memory | merge | model | doctor  (each with --help)

Outputs go to trainer.default_local_dir (runs/<experiment_name>): config.yaml,
metrics.jsonl, curve.png, checkpoints/, summary.txt. Rerunning the same command resumes
from the latest checkpoint (trainer.resume_mode=disable starts over).
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainer", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (dotted keys)")
    parser.add_argument(
        "--list-models", action="store_true",
        help="import the installed model packages and list their registered adapters",
    )
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
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
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        run, _ = SUBCOMMANDS[argv[0]]
        return run(argv[1:])
    args = build_parser().parse_args(argv)
    if args.list_models:
        return list_models(training_adapters.loader)
    from omni_trainer.config import ConfigError, load_config, to_yaml

    try:
        config = load_config(list(args.overrides))
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.print_config:
        print(to_yaml(config), end="")
        return 0
    if config.trainer.engine == "verl":
        from omni_trainer.verl_engine.errors import MissingExtrasError
        from omni_trainer.verl_engine.launch import run as run_verl

        try:
            return run_verl(config)
        except (MissingExtrasError, ConfigError) as exc:
            print(exc, file=sys.stderr)
            return 2
    from omni_trainer.local_trainer import LocalTrainer

    trainer = LocalTrainer(config)
    trainer.setup()
    trainer.fit()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
