"""How verl 0.9.1 splits a step's samples over its ranks, checked before launch.

verl asserts each of these at run time, minutes in (after the first rollout), with its own
wording. ``world`` = ``trainer.nnodes * trainer.n_gpus_per_node``; the data-parallel size is
``world`` (our runs have no Ulysses sequence parallelism); ``M`` = ``ppo_mini_batch_size *
rollout.n`` samples an update. The V1 trainer first pads the step's ``train_batch_size *
rollout.n`` samples with dummy rows to a multiple of ``lcm(dp, M)``
(``trainer/ppo/v1/trainer_base.py`` ``_get_required_batch_multiple``), so each rank gets
``padded / dp`` samples and each update ``M / dp`` of them. Then:

- ``workers/engine_workers.py:267``: ``M % dp == 0`` (the update's samples split evenly);
- ``workers/engine/utils.py:125`` (fixed-size micro-batches): a rank's samples are a multiple
  of the micro-batch: ``M / dp`` of ``actor.ppo_micro_batch_size_per_gpu`` in the update, and
  ``padded / dp`` of ``rollout.log_prob_micro_batch_size_per_gpu`` (the old log-probs, and the
  reference's under LoRA) and of ``ref.log_prob_micro_batch_size_per_gpu`` (a separate
  reference model). Every step of a run has ``train_batch_size * n`` samples (a failed sample
  stays, masked), so ``padded`` is the same each step;
- ``utils/seqlen_balancing.py:384`` (dynamic batch sizes): each ``*max_token_len_per_gpu`` at
  least the longest sequence, up to ``prompt_length + max_response_length``;
- ``workers/engine_workers.py:616``: ``actor.use_dynamic_bsz ==
  rollout.log_prob_use_dynamic_bsz``;
- ``utils/config.py:124`` (``validate_config``, fixed sizes): ``train_batch_size * n`` a
  multiple of ``world``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"


@dataclass(frozen=True)
class BatchPlan:
    """The numbers verl splits a step by (names as in verl's config)."""

    world: int
    train_batch_size: int
    n: int
    ppo_mini_batch_size: int
    ppo_micro_batch_size_per_gpu: int
    log_prob_micro_batch_size_per_gpu: int
    ref_log_prob_micro_batch_size_per_gpu: int | None  # None: no separate reference model runs
    use_dynamic_bsz: bool = False
    log_prob_use_dynamic_bsz: bool = False
    ref_log_prob_use_dynamic_bsz: bool = False
    sequence_length: int = 0  # prompt budget + max_response_length
    ppo_max_token_len_per_gpu: int = 0
    log_prob_max_token_len_per_gpu: int = 0
    ref_log_prob_max_token_len_per_gpu: int = 0

    @classmethod
    def from_verl(cls, verl_config: Any, *, separate_reference: bool) -> BatchPlan:
        """From a translated verl config; ``separate_reference``: a reference model of its own
        computes log-probs (a KL term and no LoRA; under LoRA the actor does, with the
        rollout's log-prob sizes)."""
        actor, rollout, ref = verl_config.actor_rollout_ref.actor, verl_config.actor_rollout_ref.rollout, verl_config.actor_rollout_ref.ref
        data, trainer = verl_config.data, verl_config.trainer
        prompt = rollout.get("prompt_length") or data.max_prompt_length
        return cls(
            world=int(trainer.nnodes) * int(trainer.n_gpus_per_node),
            train_batch_size=int(data.train_batch_size), n=int(rollout.n),
            ppo_mini_batch_size=int(actor.ppo_mini_batch_size),
            ppo_micro_batch_size_per_gpu=int(actor.ppo_micro_batch_size_per_gpu or 0),
            log_prob_micro_batch_size_per_gpu=int(rollout.log_prob_micro_batch_size_per_gpu or 0),
            ref_log_prob_micro_batch_size_per_gpu=int(ref.log_prob_micro_batch_size_per_gpu or 0) if separate_reference else None,
            use_dynamic_bsz=bool(actor.use_dynamic_bsz), log_prob_use_dynamic_bsz=bool(rollout.log_prob_use_dynamic_bsz),
            ref_log_prob_use_dynamic_bsz=bool(ref.get("log_prob_use_dynamic_bsz", False)),
            sequence_length=int(prompt) + int(data.max_response_length),
            ppo_max_token_len_per_gpu=int(actor.ppo_max_token_len_per_gpu or 0),
            log_prob_max_token_len_per_gpu=int(rollout.log_prob_max_token_len_per_gpu or 0),
            ref_log_prob_max_token_len_per_gpu=int(ref.get("log_prob_max_token_len_per_gpu") or 0),
        )

    @property
    def update_samples(self) -> int:
        """``M``: the samples of one update."""
        return self.ppo_mini_batch_size * self.n

    @property
    def padded_samples(self) -> int:
        """A step's samples once verl pads them to a multiple of ``lcm(dp, M)``."""
        multiple = math.lcm(self.world, self.update_samples)
        return -(-self.train_batch_size * self.n // multiple) * multiple


def batch_split_problems(plan: BatchPlan) -> list[str]:
    """Each way verl would fail to split a step of ``plan`` over its ranks, as the key to change
    and the numbers (empty: every split verl asserts holds)."""
    world, samples, update = plan.world, plan.train_batch_size * plan.n, plan.update_samples
    ranks = f"trainer.nnodes x trainer.n_gpus_per_node = {world} rank{'s' if world > 1 else ''}"
    problems = []
    if update % world:
        problems.append(
            f"{ACTOR}.ppo_mini_batch_size={plan.ppo_mini_batch_size} x {ROLLOUT}.n={plan.n} = {update} samples an update "
            f"do not split evenly over {ranks}; make the product a multiple of {world}"
        )
        return problems  # every per-rank size below divides by the ranks
    if plan.use_dynamic_bsz != plan.log_prob_use_dynamic_bsz:
        problems.append(
            f"{ACTOR}.use_dynamic_bsz={plan.use_dynamic_bsz} and {ROLLOUT}.log_prob_use_dynamic_bsz="
            f"{plan.log_prob_use_dynamic_bsz} differ; verl's actor worker requires them equal"
        )
    if not plan.use_dynamic_bsz and samples % world:
        problems.append(
            f"data.train_batch_size={plan.train_batch_size} x {ROLLOUT}.n={plan.n} = {samples} samples a step do not "
            f"split evenly over {ranks} (verl's validate_config); make the product a multiple of {world}"
        )
    per_update, per_step = update // world, plan.padded_samples // world
    fixed = [
        (not plan.use_dynamic_bsz, f"{ACTOR}.ppo_micro_batch_size_per_gpu", plan.ppo_micro_batch_size_per_gpu,
         per_update, f"per update ({update} an update", "the update"),
        (not plan.log_prob_use_dynamic_bsz, f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu",
         plan.log_prob_micro_batch_size_per_gpu, per_step, f"per step ({plan.padded_samples} a step, padded to whole updates,",
         "the old log-probs"),
    ]
    if plan.ref_log_prob_micro_batch_size_per_gpu is not None:
        fixed.append((not plan.ref_log_prob_use_dynamic_bsz, f"{REF}.log_prob_micro_batch_size_per_gpu",
                      plan.ref_log_prob_micro_batch_size_per_gpu, per_step,
                      f"per step ({plan.padded_samples} a step, padded to whole updates,", "the reference's log-probs"))
    for applies, key, micro, share, counted, what in fixed:
        if applies and micro > 0 and share % micro:
            fits = ", ".join(str(d) for d in range(1, share + 1) if share % d == 0)
            problems.append(
                f"{key}={micro} does not divide the {share} samples each rank takes {counted} over {ranks}); "
                f"verl cuts them into micro-batches of it for {what}; use one of {fits}"
            )
    dynamic = [
        (plan.use_dynamic_bsz, f"{ACTOR}.ppo_max_token_len_per_gpu", plan.ppo_max_token_len_per_gpu),
        (plan.log_prob_use_dynamic_bsz, f"{ROLLOUT}.log_prob_max_token_len_per_gpu", plan.log_prob_max_token_len_per_gpu),
    ]
    if plan.ref_log_prob_micro_batch_size_per_gpu is not None:
        dynamic.append((plan.ref_log_prob_use_dynamic_bsz, f"{REF}.log_prob_max_token_len_per_gpu",
                        plan.ref_log_prob_max_token_len_per_gpu))
    for applies, key, tokens in dynamic:
        if applies and tokens < plan.sequence_length:
            problems.append(
                f"{key}={tokens} is under the longest sequence a sample can have ({plan.sequence_length} tokens: the "
                "prompt budget plus data.max_response_length); verl's dynamic batching needs each sequence to fit"
            )
    return problems
