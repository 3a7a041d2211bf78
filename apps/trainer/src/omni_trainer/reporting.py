"""What a run prints and leaves for a reader: the step line, the curve, summary.txt."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from omni_trainer.config import Config, uses_embedded_default
from omni_trainer.run_dir import MetricsLog, draw_curve
from omni_training.consistency import PEARSON, pearson_undefined_reason

DROPPED_KEY = "data/dropped_rows"
"""Rows of the train files left out at load (bad rows with ``on_bad_row=skip``, overlong prompts)."""


PREFERENCE_ACCURACY = "rewards/accuracies"
"""A preference step's headline (TRL's name): where the policy prefers the chosen answer more
than the reference does."""


def step_line(step: int, total: int, m: Mapping[str, float]) -> str:
    grad = f"grad {m.get('actor/grad_norm', float('nan')):.3f} | {m['timing_s/step']:.1f} s"
    if "critic/score/mean" not in m and PREFERENCE_ACCURACY in m:  # offline preference: no rollout
        line = (f"step {step:>4}/{total} | loss {m['loss']:.4f} | pref acc {m[PREFERENCE_ACCURACY]:.3f} | "
                f"margin {m['rewards/margins']:.3f} | {grad}")
    else:
        acc = f"acc {m['critic/acc/mean']:.3f} | " if "critic/acc/mean" in m else ""  # verl's training has none
        line = f"step {step:>4}/{total} | reward {m['critic/score/mean']:.3f} | {acc}{pearson_text(m)} | {grad}"
    line += "".join(f" | {part}" for part in feature_parts(m))
    if m.get(DROPPED_KEY):
        line += f" | dropped rows {int(m[DROPPED_KEY])}"
    return line


def feature_parts(m: Mapping[str, float]) -> list[str]:
    """What the step's optional features did, each only where its metrics are present:
    rollout correction's importance weights and their effective sample size (and the share
    rejection sampling masked), skipped policy updates, distillation's KL (verl: its loss),
    the samples' staleness under asynchronous training, and samples whose reward failed (scored
    0: a scorer or judge that erred or timed out, under ``reward.max_error_rate``)."""
    parts = []
    errors, timeouts = int(m.get("reward/errors", 0)), int(m.get("reward/timeouts", 0))
    if errors or timeouts:
        parts.append(f"reward failed: {errors} errors, {timeouts} timeouts")
    if "rollout_corr/rollout_is_mean" in m:
        ess = m.get("rollout_corr/rollout_is_eff_sample_size")
        parts.append(f"IS w {m['rollout_corr/rollout_is_mean']:.3f}" + (f" ESS {ess:.3f}" if ess is not None else ""))
    if "rollout_corr/rollout_rs_masked_fraction" in m:
        parts.append(f"RS masked {m['rollout_corr/rollout_rs_masked_fraction']:.1%}")
    skipped = m.get("actor/skipped_step")
    if skipped:
        parts.append(f"skipped {skipped:.0%} of updates")
    elif skipped is None and not math.isfinite(m.get("actor/grad_norm", 0.0)):
        parts.append("update skipped (grad not finite)")
    if "distill/kl_mean" in m:
        parts.append(f"distill KL {m['distill/kl_mean']:.4f}")
    elif "distillation/loss" in m:
        parts.append(f"distill loss {m['distillation/loss']:.4f}")
    if "async/staleness_mean" in m:
        parts.append(f"staleness {m['async/staleness_mean']:.1f} (max {m.get('async/staleness_max', float('nan')):.0f})")
    return parts


def pearson_text(m: Mapping[str, float]) -> str:
    """``pearson 0.9990``, or ``pearson n/a (why)`` where it is undefined or not measured; the
    metric itself stays NaN (verl's too)."""
    if PEARSON not in m:
        return "pearson n/a (not measured: no separate old log-prob pass, as in rollout-correction bypass mode)"
    value = m[PEARSON]
    if not math.isnan(value):
        return f"pearson {value:.4f}"
    reason = pearson_undefined_reason(m)
    return f"pearson n/a ({reason})" if reason else "pearson n/a"


def report_step(
    run_dir: Path, log: MetricsLog, config: Config, step: int, total: int, m: Mapping[str, float], out: IO[str] | None = None
) -> None:
    """Print the step line (to ``out``, default stdout) and redraw ``curve.png``."""
    print(step_line(step, total, m), file=out or sys.stdout, flush=True)
    if "critic/score/mean" not in m and PREFERENCE_ACCURACY in m:
        series = {"preference accuracy": log.series(PREFERENCE_ACCURACY), "loss": log.series("loss")}
        title = "preference accuracy and loss per step"
    else:
        series = {"reward": log.series("critic/score/mean"), "acc": log.series("critic/acc/mean")}
        title = "reward and accuracy per step"
    draw_curve(run_dir / "curve.png", series, f"{config.trainer.experiment_name}: {title}")


NO_VALIDATION = "data.val_files is not set: no validation runs and no val-core/* metrics are reported"
"""What a run without validation files says; the training rows are never scored as validation."""


def validates(config: Config) -> bool:
    """Whether the run has validation rows: its own ``data.val_files``, or the built-in task's."""
    return bool(config.data.val_files) or config.data.train_files is None


def validation_line(step: int, metrics: Mapping[str, float]) -> str:
    values = ", ".join(f"{key.removeprefix('val-core/')} {value:.3f}" for key, value in sorted(metrics.items()))
    return f"validation at step {step}: {values or 'no validation rows (' + NO_VALIDATION + ')'}"


TREND_WINDOW = 5


def trend_line(label: str, values: Sequence[float]) -> str:
    """How ``values`` (one per step) moved: the means of the first and last
    :data:`TREND_WINDOW` steps, or, for fewer than two windows' worth, every step's value."""
    if not values:
        return f"{label}: no step recorded one"
    if len(values) < 2 * TREND_WINDOW:
        return f"{label} by step: " + ", ".join(f"{value:.3f}" for value in values)
    first = sum(values[:TREND_WINDOW]) / TREND_WINDOW
    recent = sum(values[-TREND_WINDOW:]) / TREND_WINDOW
    return f"{label}: first {TREND_WINDOW} steps {first:.3f} -> last {TREND_WINDOW} steps {recent:.3f}"


def write_summary(
    run_dir: Path, config: Config, *, step: int, steps_this_session: int, elapsed: float, log: MetricsLog,
    final: Mapping[str, float], checkpoint: Path | None, uses_lora: bool, dropped: int,
    lora_note: str = " (LoRA adapter in adapter/)",
) -> str:
    """``lora_note`` follows the checkpoint's path when the run trains LoRA: where its adapter is."""
    label, key = "mean reward", "critic/score/mean"
    if not log.series(key) and log.series(PREFERENCE_ACCURACY):
        label, key = "preference accuracy", PREFERENCE_ACCURACY
    lines = [
        f"run directory: {run_dir.resolve()}",
        f"steps: {step} in total, {steps_this_session} in {elapsed:.0f} s this session",
        trend_line(label, [v for _, v in log.series(key)]),
        *(f"{key}: {value:.3f}" for key, value in sorted(final.items())),
        *([] if validates(config) else [f"validation: none ({NO_VALIDATION})"]),
        f"dropped rows (left out of the train files at load): {dropped}",
        f"curve: {(run_dir / 'curve.png').resolve()}",
        f"metrics: {(run_dir / 'metrics.jsonl').resolve()}",
        f"latest checkpoint: {checkpoint.resolve() if checkpoint else 'none'}"
        + (lora_note if uses_lora and checkpoint else ""),
    ]
    if uses_embedded_default(config):
        lines.append(
            "next: point it at a real model and data, e.g. uv run trainer "
            "actor_rollout_ref.model.path=$MODEL_PATH data.train_files=$TRAIN_FILE"
        )
    text = "\n".join(lines)
    (run_dir / "summary.txt").write_text(text + "\n")
    return text


def complete_message(run_dir: Path, step: int, total: int) -> str:
    return (
        f"The run in {run_dir.resolve()} is already complete ({step} of {total} steps; summary in "
        f"{(run_dir / 'summary.txt').resolve()}).\n"
        "To train further, raise trainer.total_training_steps (or trainer.total_epochs); to start over, add "
        "trainer.resume_mode=disable (the earlier run is moved aside) or choose another trainer.experiment_name."
    )
