"""Stop a run whose policy updates are all being skipped.

Both engines skip an optimizer step whose gradient norm is not finite (NaN or inf): the
weights stay as they were. Once in a while that is a spike; step after step it means the
loss itself is broken (a NaN in the data, an overflow in bf16, a learning rate that blew the
weights up), and the run would spend its budget and write checkpoints that learned nothing,
then exit 0. After :data:`SKIPPED_STEPS_TO_STOP` skipped steps in a row it stops, exit 2.

- Local engine: a step is skipped when every one of its updates was (``actor/skipped_step``
  is the share of them that were).
- verl engine: a step is skipped when its ``actor/grad_norm`` (verl's mean over the step's
  updates) is not finite, i.e. an update of it was skipped; checked by our trainer
  (:mod:`omni_trainer.engines.verl.trainer`) after the step's update.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from omni_trainer.reward_guard import RewardFailureError

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
