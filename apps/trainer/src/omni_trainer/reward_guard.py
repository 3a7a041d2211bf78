"""``reward.max_error_rate``: stop a run whose scorer fails on most of a step's samples.

A sample whose scorer raised or timed out scores 0 and is counted (``reward/errors``,
``reward/timeouts``; on verl ``reward_error``, ``reward_timeout``). A few such samples are
noise; most of a step means the scorer (or the data it reads) is broken, and training on
those zeros would teach the policy nothing true. Both engines check each training step's
share of failed samples against the rate and stop with :class:`RewardFailureError`.
Samples skipped for an unknown data source (``on_unknown_data_source=skip``) were skipped
on purpose and do not count; validation does not count either.

- Local engine: :func:`omni_trainer.engines.local.step.train_step` checks right after scoring, before
  anything is trained on the step.
- verl engine: verl scores each sample in its agent-loop workers and stores it. Our workers
  tally each step's ``reward_<status>`` indicators (:func:`count_sample`), and our replay
  buffer checks the tallies (:class:`StepFailureWatch`) when verl's trainer takes the step's
  batch, before anything is trained on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omni_rollout.speech_sample import SOURCE_TRUNCATED

FAILED_STATUSES = ("error", "timeout")


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
    """A training step's scored samples and how many of them failed."""

    failed: int = 0
    total: int = 0
    masked: int = 0
    """Samples kept out of training (:data:`MASKED_FLAG`)."""


def count_sample(tallies: dict[int, StepTally], step: int, reward_info: Mapping[str, Any]) -> None:
    """Count one sample of ``step`` from its ``reward_<status>`` indicators (0/1; see
    :mod:`omni_trainer.engines.verl.reward`). A sample without them was not scored by omni-rewards:
    not counted."""
    if "reward_ok" not in reward_info:
        return
    tally = tallies.setdefault(step, StepTally())
    tally.total += 1
    tally.failed += any(float(reward_info.get(f"reward_{status}", 0.0)) for status in FAILED_STATUSES)
    tally.masked += bool(reward_info.get(MASKED_FLAG, False))


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

    def add(self, tallies: Mapping[int, StepTally]) -> None:
        for step, tally in tallies.items():
            merged = self.tallies.setdefault(step, StepTally())
            merged.failed += tally.failed
            merged.total += tally.total
            merged.masked += tally.masked

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
                run_dir=run_dir,
            )
            if complete and tally.masked >= tally.total:
                raise NothingToTrainError(
                    f"step {step}: all {tally.total} speech samples were kept out of training: the text each spoke "
                    "was cut at its length limit (vLLM-Omni's thinker answers within its deploy default, 2048 tokens, "
                    "and its max_model_len), and vLLM-Omni conditions the talker one text row short of such an "
                    "answer. Ask for shorter answers in the prompts."
                )
            if complete:
                del self.tallies[step]
