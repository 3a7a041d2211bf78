"""``uv run trainer [key=value ...]``: train with the local engine (verl-style overrides).

With no arguments it runs the embedded default: a tiny Qwen3-Omni, built offline, learns
the built-in task on the CPU in minutes. ``--list-models`` shows the installed adapters.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from omni_contracts import ModelPackageImportError, ModelPackageLoader, rollout_adapters, training_adapters
from omni_trainer.library_noise import silence_known_noise
from omni_trainer.subcommands import SUBCOMMANDS
# Everything else is imported where it is used, for start-up speed: `trainer --help` answers
# without loading the config, the engines or torch, and each subcommand loads what it uses.

if TYPE_CHECKING:
    from omni_trainer.engines import Engine
    from omni_trainer.interrupts import StopRequest
    from omni_trainer.resolved import ResolvedRun

DESCRIPTION = """\
RL post-training for omni-modal models (GSPO/GRPO-style) on Qwen3-Omni and friends.

  uv run trainer                      the embedded default: a tiny Qwen3-Omni built offline
                                      learns the built-in task on the CPU in a few minutes
  uv run trainer key=value ...        verl-style overrides, e.g.
      actor_rollout_ref.model.path=/models/Qwen3-Omni-30B-A3B-Instruct
      actor_rollout_ref.actor.policy_loss.loss_mode=gspo algorithm.adv_estimator=grpo
      actor_rollout_ref.rollout.n=8 trainer.total_training_steps=100

Other jobs: trainer convert | tiny | plan-memory | merge | model | doctor  (each with --help)

Outputs go to trainer.default_local_dir (runs/<experiment_name>; the name defaults to
<model>-<data>-<digest>): config.yaml, metrics.jsonl, curve.png, checkpoints/, summary.txt.
Rerunning the same command resumes from the newest complete checkpoint (other settings or
data than the run was saved with are listed and refused unless trainer.resume_anyway=true);
trainer.resume_mode=disable starts over and moves the earlier run to <dir>.previous;
trainer.resume_mode=resume_path trainer.resume_from_path=<run>/checkpoints/step_N resumes
from that checkpoint. One run at a time per directory (a second is refused).
Ctrl-C during start-up stops at once; during training it stops at the end of the step,
saves and exits (Ctrl-C again: quit without saving).
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
    parser.add_argument(
        "--help-config", metavar="KEY",
        help="print what KEY means: its type, default, range or choices, the engines that read it, how verl gets it",
    )
    return parser


def help_config(name: str) -> int:
    from omni_trainer.config import Config, closest_keys
    from omni_trainer.keys import help_text

    text = help_text(Config, name)
    if text is not None:
        print(text)
        return 0
    close = closest_keys(name)
    known = f"; did you mean {' or '.join(close)}?" if close and name not in close else ""
    print(f"{name}: no such key (`uv run trainer --print-config` prints every key){known}", file=sys.stderr)
    return 2


def list_models(loader: ModelPackageLoader) -> int:
    installed = loader.installed()
    print(f"Model packages (entry-point group '{loader.group}'):")
    for package in installed:
        print(f"  {package.describe()}")
    if not installed:
        print("  none installed (a checkout run without installing it: name the modules in OMNI_RL_MODEL_MODULES)")
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


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors a user's config, files or data cause: a message and exit status 2, no traceback."""
    from omni_contracts import OmniContractError
    from omni_data.errors import OmniDataError
    from omni_rewards import UnknownDataSourceError
    from omni_trainer.config import ConfigError
    from omni_rewards.reward_file import CustomRewardError
    from omni_training.run_guards import RewardFailureError
    from omni_trainer.run_lock import RunDirBusyError
    from omni_trainer.engines.verl.errors import MissingExtrasError
    from omni_training.checkpoint import CheckpointSpaceError
    from omni_training.distillation import DistillationConfigError

    return (ConfigError, OmniContractError, OmniDataError, UnknownDataSourceError, CustomRewardError,
            MissingExtrasError, DistillationConfigError, RunDirBusyError, RewardFailureError, CheckpointSpaceError)


def main(argv: Sequence[str] | None = None) -> int:
    silence_known_noise()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        run, _ = SUBCOMMANDS[argv[0]]
        return run(argv[1:])
    args = build_parser().parse_args(argv)
    if args.list_models:
        return list_models(training_adapters.loader)
    if args.help_config:
        return help_config(args.help_config)
    from omni_trainer.interrupts import StopRequest

    stop = StopRequest()  # Ctrl-C from here on: start-up stops at once, training at a step's end
    with stop.installed():
        try:
            return _check_and_train(args, stop)
        except KeyboardInterrupt:
            print("interrupted before the run started", file=sys.stderr)
            return 130


def _check_and_train(args: argparse.Namespace, stop: StopRequest) -> int:
    from omni_trainer.config import ConfigError, load_config, to_yaml
    from omni_trainer.engines import engine_for
    from omni_trainer.preflight import preflight
    from omni_trainer.resolved import resolve_run

    try:
        config = load_config(list(args.overrides))
        engine = engine_for(config.trainer.engine)
        for note in engine.prepare(config):
            print(f"note: {note}", file=sys.stderr)
        run = resolve_run(config)  # the config is final: its files are read once, here
        warnings = preflight(run)  # before any model, tokenizer or dataset loads
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.print_config:
        print(to_yaml(config), end="")
        return 0
    try:
        return _train(run, engine, stop)
    except user_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if stop.starting and engine.marks_start_up:
            print("interrupted during start-up: stopped; nothing was trained in this session", file=sys.stderr)
        else:
            print(f"interrupted: quit without saving; the newest checkpoint in {config.trainer.default_local_dir} "
                  "is kept (run the same command to resume from it)", file=sys.stderr)
        return 130


def _train(run: ResolvedRun, engine: Engine, stop: StopRequest) -> int:
    from pathlib import Path

    from omni_trainer.run_lock import RunDirLock

    with RunDirLock(Path(run.config.trainer.default_local_dir).expanduser()):  # before anything is read there
        return engine.run(run, stop)


if __name__ == "__main__":
    raise SystemExit(main())
