"""Asynchronous rollout on the local engine (``async_training.max_staleness > 0``).

A background thread samples and scores the coming steps with its own copy of the policy
while the trainer updates on the current one. Policy version ``v`` is the actor after ``v``
optimizer steps; step ``t`` trains on samples of a version no older than ``t - 1 - k``
(``k = max_staleness``; the synchronous loop is ``k = 0``). After each update the trainer
publishes its trainable weights, and the thread loads the newest before each batch it
samples. The prompts of the coming steps are prepared on the trainer's thread and handed
over (media processing stays on one thread). Every sample keeps the version that drew it: the step's old log-probs are the
rollout's own (rollout correction's bypass mode, which the pre-flight requires, as verl's
one-step-off recipe sets), so the importance ratio and any correction compare the policy
being trained with the one that sampled.

Metrics, per step: ``async/staleness`` (versions between the sampler and the trainer),
``async/staleness_{s}`` (how many steps so far trained at staleness ``s``: the histogram),
``timing_s/wait_rollout`` (the trainer waiting for its batch) and ``timing_s/rollout_idle``
(the thread waiting, since the last step, for a version recent enough).

The copy doubles the policy's memory; on a machine whose cores both sides share, the overlap
buys only what the two leave idle (``benchmarks/async_rollout.py`` measures it).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from omni_trainer.prompts import Prepared
from omni_trainer.engines.local.step import Rollouts, Sampler, Scores, StepParts


@dataclass
class Sampled:
    """One step's samples and scores, and the policy version that drew them."""

    step: int
    rollouts: Rollouts
    scores: Scores
    version: int


@dataclass
class _Shared:
    """What the trainer and the thread exchange, under ``lock`` (``changed`` wakes either side)."""

    version: int  # the trainer's newest published version
    weights: dict[str, torch.Tensor] | None = None  # its trainable tensors, not yet loaded by the thread
    prompts: dict[int, Sequence[Prepared]] = field(default_factory=dict)  # handed over, not yet sampled
    ready: dict[int, Sampled] = field(default_factory=dict)
    error: BaseException | None = None
    closed: bool = False
    idle_seconds: float = 0.0


class AsyncSampler(Sampler):
    """A :class:`Sampler` whose rollouts were drawn ahead by a thread (see the module docstring).

    ``background`` samples and scores with the policy copy ``policy``; ``trainable`` names the
    actor's trainable parameters to publish (the copy's parameters of the same names load them).
    """

    def __init__(
        self,
        background: Sampler,
        policy: torch.nn.Module,
        trainable: Callable[[], dict[str, torch.Tensor]],
        schedule: Callable[[int], Sequence[Prepared]],
        *,
        first_step: int,
        last_step: int,
        max_staleness: int,
    ) -> None:
        if max_staleness < 1:
            raise ValueError(f"async_training.max_staleness={max_staleness}: asynchronous rollout needs >= 1")
        self.background = background
        self.reads_old_log_probs = background.reads_old_log_probs
        self.policy = policy
        self.trainable = trainable
        self.schedule = schedule
        self.max_staleness = max_staleness
        self.last_step = last_step
        self.histogram: dict[int, int] = {}
        self._pending: Sampled | None = None
        self._step_metrics: dict[str, float] = {}
        # The steps before first_step are trained: the actor is version first_step - 1.
        self._shared = _Shared(version=first_step - 1)
        self._handed = first_step - 1  # the last step whose prompts the thread has
        self._lock = threading.Condition()
        self._pause = threading.Lock()  # held while the thread samples; validation takes it
        self._hand_over(first_step - 1)
        self._thread = threading.Thread(target=self._run, args=(first_step,), name="omni-async-rollout", daemon=True)
        self._thread.start()

    def _hand_over(self, version: int) -> None:
        """The prompts of every step ``version`` may sample (up to ``version + 1 + k``)."""
        upto = min(version + 1 + self.max_staleness, self.last_step)
        prompts = {step: self.schedule(step) for step in range(self._handed + 1, upto + 1)}
        self._handed = max(self._handed, upto)
        with self._lock:
            self._shared.prompts.update(prompts)
            self._lock.notify_all()

    # --- the trainer's side ----------------------------------------------------------------------

    def rollout(self, prompts: Sequence[Prepared], step: int) -> Rollouts:
        started = time.perf_counter()
        with self._lock:
            while step not in self._shared.ready and self._shared.error is None:
                self._lock.wait()
            if step not in self._shared.ready:
                raise RuntimeError(f"the asynchronous rollout failed before step {step}") from self._shared.error
            sampled = self._shared.ready.pop(step)
            idle, self._shared.idle_seconds = self._shared.idle_seconds, 0.0
            trainer_version = self._shared.version
        drawn = list({id(p): p for p in sampled.rollouts.owners}.values())
        if len(drawn) != len(prompts) or any(
            not torch.equal(a.inputs["input_ids"], b.inputs["input_ids"]) for a, b in zip(drawn, prompts, strict=True)
        ):
            raise RuntimeError(f"step {step}: the asynchronous rollout sampled other prompts than the step's")
        staleness = trainer_version - sampled.version
        self.histogram[staleness] = self.histogram.get(staleness, 0) + 1
        self._pending = sampled
        self._step_metrics = {
            "async/staleness": float(staleness),
            "async/policy_version": float(sampled.version),
            **{f"async/staleness_{s}": float(n) for s, n in sorted(self.histogram.items())},
            "timing_s/wait_rollout": time.perf_counter() - started,
            "timing_s/rollout_idle": idle,
        }
        return sampled.rollouts

    def score(self, rollouts: Rollouts) -> Scores:
        assert self._pending is not None and self._pending.rollouts is rollouts
        return self._pending.scores

    def log_prob_extras(self, parts: StepParts, rollouts: Rollouts, micro: Sequence[Any], old_log_probs: torch.Tensor | None,
                        mask: torch.Tensor) -> dict[str, float]:
        return self.background.log_prob_extras(parts, rollouts, micro, old_log_probs, mask)

    def rollout_metrics(self) -> dict[str, float]:
        return {**self.background.rollout_metrics(), **self._step_metrics}

    def publish(self, version: int) -> None:
        """The actor's weights after its ``version``-th optimizer step, for the thread's next batch."""
        weights = {name: tensor.detach().clone() for name, tensor in self.trainable().items()}
        with self._lock:
            self._shared.version = version
            self._shared.weights = weights
            self._lock.notify_all()
        self._hand_over(version)

    def paused(self) -> threading.Lock:
        """Held, the thread samples nothing (validation shares the reward workers with it)."""
        return self._pause

    def close(self) -> None:
        with self._lock:
            self._shared.closed = True
            self._lock.notify_all()
        self._thread.join(timeout=60)

    # --- the thread's side -----------------------------------------------------------------------

    def _run(self, first_step: int) -> None:
        torch.set_grad_enabled(False)
        try:
            for step in range(first_step, self.last_step + 1):
                waited = time.perf_counter()
                with self._lock:
                    # The batch of `step` may be drawn by version step - 1 - k at the oldest.
                    while (self._shared.version < step - 1 - self.max_staleness or step not in self._shared.prompts) \
                            and not self._shared.closed:
                        self._lock.wait()
                    if self._shared.closed:
                        return
                    prompts = self._shared.prompts.pop(step)
                    weights, self._shared.weights = self._shared.weights, None
                    version = self._shared.version
                    self._shared.idle_seconds += time.perf_counter() - waited
                if weights is not None:
                    self._load(weights)
                with self._pause:
                    rollouts = self.background.rollout(prompts, step)
                    scores = self.background.score(rollouts)
                with self._lock:
                    self._shared.ready[step] = Sampled(step, rollouts, scores, version)
                    self._lock.notify_all()
        except BaseException as exc:  # handed to the trainer, which raises it with the step it waits for
            with self._lock:
                self._shared.error = exc
                self._lock.notify_all()

    def _load(self, weights: dict[str, torch.Tensor]) -> None:
        parameters = dict(self.policy.named_parameters())
        for name, tensor in weights.items():
            parameters[name].data.copy_(tensor)


def policy_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The rollout thread's own copy of the policy, frozen."""
    return copy.deepcopy(model).eval().requires_grad_(False)
