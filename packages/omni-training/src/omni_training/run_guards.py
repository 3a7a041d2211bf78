"""What stops a run that would go on without learning, on both engines.

## ``reward.max_error_rate``: a scorer that fails on most of a step's samples

A sample whose scorer raised or timed out scores 0 and is counted (``reward/errors``,
``reward/timeouts``; on verl ``reward_error``, ``reward_timeout``). A few such samples are
noise; most of a step means the scorer (or the data it reads) is broken, and training on
those zeros would teach the policy nothing true. Both engines check each training step's
share of failed samples against the rate and stop with :class:`RewardFailureError`.
Samples skipped for an unknown data source (``on_unknown_data_source=skip``) were skipped
on purpose and do not count; validation does not count either.

- Local engine: the app's step (``omni_trainer.engines.local.step``) checks right after scoring, before
  anything is trained on the step.
- verl engine: verl scores each sample in its agent-loop workers and stores it. Our workers
  tally each step's ``reward_<status>`` indicators (:func:`count_sample`), and our replay
  buffer checks the tallies (:class:`StepFailureWatch`) when verl's trainer takes the step's
  batch, before anything is trained on it.

## Skipped updates: a loss that is broken

Both engines skip an optimizer step whose gradient norm is not finite (NaN or inf): the
weights stay as they were. Once in a while that is a spike; step after step it means the
loss itself is broken (a NaN in the data, an overflow in bf16, a learning rate that blew the
weights up), and the run would spend its budget and write checkpoints that learned nothing,
then exit 0. After :data:`SKIPPED_STEPS_TO_STOP` skipped steps in a row it stops, exit 2.

- Local engine: a step is skipped when every one of its updates was (``actor/skipped_step``
  is the share of them that were).
- verl engine: a step is skipped when its ``actor/grad_norm`` (verl's mean over the step's
  updates) is not finite, i.e. an update of it was skipped; checked by our trainer
  (:mod:`omni_verl.trainer`) after the step's update.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from omni_contracts.speech import SOURCE_TRUNCATED

FAILED_STATUSES = ("error", "timeout")
REWARD_REASON = "reward_reason"
"""The ``reward_extra_info`` key holding why a sample's scorer failed (empty when it did not)."""
REASONS_KEPT = 5
REWARD_FIELDS = "reward_fields"
"""The ``reward_extra_info`` key holding a sample's other scorer fields as a JSON object (one
key for every sample: verl stacks each key across a batch, and a failed sample has none)."""


class RewardFailureError(RuntimeError):
    """A training step's scorer failed on more than ``reward.max_error_rate`` of its samples."""


class NothingToTrainError(RewardFailureError):
    """Every sample of a training step was kept out of training (a speech sample whose spoken
    text was cut at its length limit: ``source_truncated``). Stops the run as a scorer's
    failures do: before the step's update, exit 2 with the message."""


MASKED_FLAG = SOURCE_TRUNCATED
"""The ``reward_extra_info`` flag of a sample kept out of training (the rollout adapter's, on a
speech sample whose spoken text was cut)."""


def check_reward_failures(
    step: int, failed: int, total: int, max_error_rate: float, examples: Sequence[str] = (), *, run_dir: str = ""
) -> None:
    """Raise when ``failed / total`` exceeds ``max_error_rate`` (never for an empty step).

    Raises:
        RewardFailureError: the message names the step, the share, the first failures and
            what to do.
    """
    if total <= 0 or failed / total <= max_error_rate:
        return
    shown = "".join(f"\n    {example}" for example in examples[:5])
    kept = f" Once fixed, the same command resumes from the newest checkpoint in {run_dir}." if run_dir else ""
    raise RewardFailureError(
        f"step {step}: the reward scorer failed (error or timeout) on {failed} of {total} samples "
        f"({failed / total:.0%}), more than reward.max_error_rate={max_error_rate:g}; the run stops instead "
        f"of training on their zero scores.{' First failures:' if shown else ''}{shown}\n"
        "  Fix the scorer (reward.custom_reward_function, or the built-in scorer of the data_source) or the "
        "data it reads; a slow scorer needs a larger reward.timeout_s. reward.max_error_rate=1.0 never stops."
        + kept
    )


@dataclass
class StepTally:
    """A training step's scored samples, how many of them failed and how, and the sums of
    the numeric fields the scorers returned, per data source."""

    failed: int = 0
    total: int = 0
    masked: int = 0
    """Samples kept out of training (:data:`MASKED_FLAG`)."""
    errors: int = 0
    timeouts: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    """``"<data_source>/<field>"`` -> the sum over the samples that returned it."""
    counts: dict[str, int] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    """Why the first failed samples failed (at most :data:`REASONS_KEPT`)."""

    def merge(self, other: StepTally) -> None:
        self.failed += other.failed
        self.total += other.total
        self.masked += other.masked
        self.errors += other.errors
        self.timeouts += other.timeouts
        self.reasons = [*self.reasons, *other.reasons][:REASONS_KEPT]
        for name, value in other.sums.items():
            self.sums[name] = self.sums.get(name, 0.0) + value
            self.counts[name] = self.counts.get(name, 0) + other.counts[name]

    def metrics(self) -> dict[str, float]:
        """The local engine's names: ``reward/errors``, ``reward/timeouts`` (counts) and
        ``reward/<data_source>/<field>/mean``."""
        means = {f"reward/{name}/mean": self.sums[name] / self.counts[name] for name in self.sums}
        return {"reward/errors": float(self.errors), "reward/timeouts": float(self.timeouts), **means}


def count_sample(
    tallies: dict[int, StepTally], step: int, reward_info: Mapping[str, Any], data_source: str = "",
) -> None:
    """Count one sample of ``step`` from its ``reward_<status>`` indicators (0/1; see
    :mod:`omni_verl.reward`), and add its other numeric fields to the sums. A sample without
    them was not scored by omni-rewards: not counted."""
    if "reward_ok" not in reward_info:
        return
    tally = tallies.setdefault(step, StepTally())
    tally.total += 1
    errored, timed_out = (bool(float(reward_info.get(f"reward_{status}", 0.0))) for status in FAILED_STATUSES)
    tally.failed += errored or timed_out
    tally.errors += errored
    tally.timeouts += timed_out
    tally.masked += bool(reward_info.get(MASKED_FLAG, False))
    reason = reward_info.get(REWARD_REASON)
    if (errored or timed_out) and reason and len(tally.reasons) < REASONS_KEPT:
        tally.reasons.append(f"{data_source or 'sample'}: {reason}")
    fields = {name: value for name, value in reward_info.items() if not name.startswith("reward_") and name != MASKED_FLAG}
    fields.update(json.loads(str(reward_info.get(REWARD_FIELDS) or "{}")))
    for name, value in fields.items():
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
            key = f"{data_source}/{name}" if data_source else name
            tally.sums[key] = tally.sums.get(key, 0.0) + float(value)
            tally.counts[key] = tally.counts.get(key, 0) + 1


class StepFailureWatch:
    """Merges the tallies of several workers and checks each step once it is decided.

    Args:
        samples_per_step: the samples a training step scores (``train_batch_size * rollout.n``).
        max_error_rate: ``reward.max_error_rate``.
    """

    def __init__(self, samples_per_step: int, max_error_rate: float) -> None:
        self.samples_per_step = samples_per_step
        self.max_error_rate = max_error_rate
        self.tallies: dict[int, StepTally] = {}
        self.decided: dict[int, StepTally] = {}
        """Complete steps that passed, until :meth:`take_metrics` reports them."""

    def add(self, tallies: Mapping[int, StepTally]) -> None:
        for step, tally in tallies.items():
            self.tallies.setdefault(step, StepTally()).merge(tally)

    def take_metrics(self, step: int) -> dict[str, float]:
        """A decided step's :meth:`StepTally.metrics` (then forgotten), or none."""
        tally = self.decided.pop(step, None)
        return tally.metrics() if tally is not None else {}

    def check(self, run_dir: str = "") -> None:
        """Check every step whose samples are all in, or whose failures already exceed the rate.

        Raises:
            RewardFailureError: such a step's failed share exceeds ``max_error_rate``.
            NothingToTrainError: every sample of a complete step was kept out of training (verl
                would stop on an empty response mask, naming none of this).
        """
        for step in sorted(self.tallies):
            tally = self.tallies[step]
            complete = tally.total >= self.samples_per_step
            # An unfinished step is measured against all its samples: it stops once its failures
            # alone exceed the rate, whatever the rest score.
            check_reward_failures(
                step, tally.failed, tally.total if complete else self.samples_per_step, self.max_error_rate,
                tally.reasons, run_dir=run_dir,
            )
            if complete and tally.masked >= tally.total:
                raise NothingToTrainError(
                    f"step {step}: all {tally.total} speech samples were kept out of training: the text each spoke "
                    "was cut at its length limit (vLLM-Omni's thinker answers within its deploy default, 2048 tokens, "
                    "and its max_model_len), and vLLM-Omni conditions the talker one text row short of such an "
                    "answer. Ask for shorter answers in the prompts."
                )
            if complete:
                self.decided[step] = self.tallies.pop(step)

SKIPPED_STEPS_TO_STOP = 3
SKIPPED_KEY = "actor/skipped_step"
GRAD_NORM_KEY = "actor/grad_norm"


class UpdatesSkippedError(RewardFailureError):
    """Several steps in a row had their policy update skipped (a non-finite gradient norm).
    Stops the run as a scorer's failures do: exit 2 with the message."""


def step_was_skipped(metrics: Mapping[str, float]) -> bool:
    """Whether ``metrics`` (one step's) show its policy update skipped."""
    if SKIPPED_KEY in metrics:
        return metrics[SKIPPED_KEY] >= 1.0
    grad_norm = metrics.get(GRAD_NORM_KEY)
    return grad_norm is not None and not math.isfinite(grad_norm)


class SkippedUpdateWatch:
    """Counts consecutive skipped steps; :meth:`observe` raises at :data:`SKIPPED_STEPS_TO_STOP`."""

    def __init__(self, limit: int = SKIPPED_STEPS_TO_STOP) -> None:
        self.limit = limit
        self.skipped: list[int] = []

    def observe(self, step: int, metrics: Mapping[str, float], run_dir: str = "") -> None:
        """Record ``step``'s metrics.

        Raises:
            UpdatesSkippedError: the last ``limit`` steps were all skipped.
        """
        if not step_was_skipped(metrics):
            self.skipped.clear()
            return
        self.skipped.append(step)
        if len(self.skipped) < self.limit:
            return
        first, last = self.skipped[0], self.skipped[-1]
        losses = ", ".join(f"{key}={metrics[key]:g}" for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy")
                           if key in metrics)
        kept = f" The same command resumes from the newest checkpoint in {run_dir}." if run_dir else ""
        raise UpdatesSkippedError(
            f"steps {first}-{last}: the policy update was skipped on each (its gradient norm was not finite: "
            f"{GRAD_NORM_KEY}={metrics.get(GRAD_NORM_KEY, float('nan')):g}{', ' + losses if losses else ''}), so the "
            f"weights have not changed since step {first - 1}; the run stops instead of going on without learning.\n"
            "  Look for a NaN or inf in the rewards or the data, lower actor_rollout_ref.actor.optim.lr, or compute in "
            f"fp32 (actor_rollout_ref.actor.fsdp_config.model_dtype=fp32).{kept}"
        )
