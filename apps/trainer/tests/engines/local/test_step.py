"""The step's phases on stand-in components: GRPO groups, and discarding an interrupted step."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from omni_contracts import RolloutSample
from omni_trainer.config import load_config
from omni_trainer.prompts import Prepared
from omni_rewards.metrics import batch_metrics
from omni_rewards.outcomes import BatchResult, SampleOutcome
from omni_training.run_guards import RewardFailureError, check_reward_failures
from omni_trainer.engines.local.step import StepDiscarded, StepParts, TrainBatch, advantage_phase, train_step
from omni_trainer.engines.local.tasks.speech_rl import SpeechSampler
from omni_trainer.engines.local.tasks.text_rl import TextSampler


class FakeEngine:
    """Two responses per prompt; counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, prompts: list[Any], sampling: Any) -> list[Any]:
        self.calls += 1
        output = SimpleNamespace(token_ids=[5], logprobs=[-0.1])
        return [SimpleNamespace(prompt_ids=[1, 2], outputs=[output] * sampling.n) for _ in prompts]


class NoUpdateActor:
    def update(self, group: Any) -> dict[str, float]:
        raise AssertionError("an interrupted step must not be trained on")

    def compute_log_probs(self, micro: Any, reference: bool = False) -> Any:
        raise AssertionError("an interrupted step must not reach the log-prob phase")


def parts(n: int = 2) -> StepParts:
    config = load_config([f"actor_rollout_ref.rollout.n={n}"])

    def loop(**kwargs: Any) -> RolloutSample:
        return RolloutSample(prompt_ids=[1, 2], response_ids=[5], response_mask=[1], response_logprobs=[-0.1])

    sampler = TextSampler(
        config=config, engine=FakeEngine(), agent_loop=loop, rollout_adapter=None, mode="thinker_only",  # type: ignore[arg-type]
        extra_field_specs={}, tokenizer=None, rewards=None,  # type: ignore[arg-type]
    )
    return StepParts(
        config=config, sampler=sampler, actor=NoUpdateActor(),  # type: ignore[arg-type]
        training_adapter=SimpleNamespace(extra_field_specs={}),  # type: ignore[arg-type]
    )


def rollout_phase(parts: StepParts, prompts: list[Prepared], step: int) -> Any:
    return parts.sampler.rollout(prompts, step)


def prompt(index: int) -> Prepared:
    return Prepared(inputs={"input_ids": torch.tensor([[1, 2]])}, data_source="d", ground_truth="1", index=index)


def test_prompts_with_equal_data_indices_form_separate_groups() -> None:
    """Two files number their rows from 0 each: prompt 0 of train.parquet and prompt 0 of
    test.parquet share ``index``. Grouping by it merged two questions into one GRPO group."""
    step_parts = parts(n=2)
    rollouts = rollout_phase(step_parts, [prompt(0), prompt(0)], step=1)
    first, second = rollouts.group_ids[:2], rollouts.group_ids[2:]
    assert first[0] == first[1] and second[0] == second[1] and first[0] != second[0]
    # Prompt A's samples both score 1, prompt B's both 0: within each group nothing differs,
    # so every advantage is 0. (Grouped by the shared index they would be +-0.87.)
    rewards = torch.tensor([[1.0], [1.0], [0.0], [0.0]])
    mask = torch.ones(4, 1)
    batch = TrainBatch(micro=[], mask=mask, token_rewards=rewards)
    advantages = advantage_phase(step_parts, rollouts, batch)
    assert torch.equal(advantages, torch.zeros(4, 1))


def test_group_ids_are_fresh_every_step() -> None:
    step_parts = parts()
    one = rollout_phase(step_parts, [prompt(3)], step=1)
    two = rollout_phase(step_parts, [prompt(3)], step=2)
    assert set(one.group_ids).isdisjoint(two.group_ids)


def test_a_stop_before_the_update_discards_the_step() -> None:
    step_parts = parts()
    with pytest.raises(StepDiscarded, match="step 7 discarded after its gen phase"):
        train_step(step_parts, 7, [prompt(0)], stop_requested=lambda: True)
    assert step_parts.sampler.engine.calls == 1  # type: ignore[attr-defined]


class FakeRewards:
    """Answers each batch with the given statuses, as the reward manager reports them."""

    def __init__(self, statuses: list[str]) -> None:
        self.statuses = statuses

    def score_batch(self, sources: list[str], *_: Any) -> BatchResult:
        outcomes = [
            SampleOutcome(source, status, {"score": 1.0 if status == "ok" else 0.0},  # type: ignore[arg-type]
                          None if status == "ok" else f"ValueError: scorer broke on sample {i}")
            for i, (source, status) in enumerate(zip(sources, self.statuses, strict=True))
        ]
        errors = [f"sample {i} (d) {o.status}, scored 0: {o.error}" for i, o in enumerate(outcomes) if o.error]
        return BatchResult(outcomes, batch_metrics(outcomes), errors)


def scored_parts(statuses: list[str]) -> StepParts:
    step_parts = parts(n=2)
    step_parts.sampler.rewards = FakeRewards(statuses)  # type: ignore[attr-defined]
    step_parts.sampler.tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens: "7")  # type: ignore[attr-defined]
    return step_parts


def test_a_step_whose_scorer_fails_on_most_samples_stops_before_training() -> None:
    """Before, the step trained on the failed samples' zeros (reward.max_error_rate, default 0.5)."""
    step_parts = scored_parts(["error", "timeout", "error", "ok"])
    with pytest.raises(RewardFailureError) as info:
        train_step(step_parts, 3, [prompt(0), prompt(1)])  # NoUpdateActor: nothing after scoring may run
    message = str(info.value)
    assert "step 3: the reward scorer failed (error or timeout) on 3 of 4 samples (75%)" in message
    assert "reward.max_error_rate=0.5" in message
    assert "sample 0 (d) error, scored 0: ValueError: scorer broke" in message
    assert "resumes from the newest checkpoint in runs/tiny-default" in message


def test_skipped_samples_do_not_count_and_the_rate_is_a_strict_bound() -> None:
    rollouts = rollout_phase(parts(n=2), [prompt(0), prompt(1)], 1)
    scores = scored_parts(["skipped", "skipped", "error", "ok"]).sampler.score(rollouts)
    assert scores.failed == 1  # skipped on purpose (on_unknown_data_source=skip): not a failure
    check_reward_failures(1, 2, 4, 0.5)  # half: not more than 0.5
    check_reward_failures(1, 4, 4, 1.0)  # 1.0 never stops
    check_reward_failures(1, 0, 0, 0.0)  # an empty step
    with pytest.raises(RewardFailureError, match="on 1 of 4 samples"):
        check_reward_failures(1, 1, 4, 0.0)


@pytest.mark.parametrize(
    ("overrides", "samples", "expected"),
    [
        ([], 16, True),  # the defaults: one epoch over one mini-batch of 8 prompts x n=2
        (["actor_rollout_ref.actor.old_log_prob=recompute"], 16, False),
        (["actor_rollout_ref.actor.ppo_epochs=2"], 16, False),  # the second epoch is off-policy
        (["actor_rollout_ref.actor.ppo_mini_batch_size=4"], 16, False),  # two optimizer steps
        (["algorithm.use_kl_in_reward=true"], 16, False),  # the reward needs them first
        (["actor_rollout_ref.actor.use_kl_loss=true"], 16, True),  # reference log-probs only
        (["algorithm.rollout_correction.rollout_is=token"], 16, False),  # weights compare old with rollout
        (["algorithm.rollout_correction.rollout_rs=token_k3", "algorithm.rollout_correction.rollout_rs_threshold=0.1"],
         16, False),
        (["algorithm.rollout_correction.bypass_mode=true"], 16, False),  # the old ones are the rollout's
    ],
)
def test_only_on_policy_steps_take_old_log_probs_from_the_update(
    overrides: list[str], samples: int, expected: bool
) -> None:
    from omni_trainer.engines.local.step import takes_old_log_probs_from_update

    step_parts = parts()
    step_parts.config = load_config(["actor_rollout_ref.rollout.n=2", *overrides])
    assert takes_old_log_probs_from_update(step_parts, samples) is expected


class FakeSpeechPolicy:
    """Returns ``returned`` renditions per call whatever ``n`` asks for (``None``: ``n``)."""

    speech_sample_rate = 16000
    speakers = ("ethan",)

    def __init__(self, returned: int | None = None) -> None:
        self.returned = returned
        self.voices: list[str | None] = []

    def sample_speech(self, sequence: Any, *, n: int, max_new_tokens: int, temperature: float = 1.0,
                      speaker: str | None = None, media: Any = None) -> list[Any]:
        from omni_contracts.speech import SpeechRollout

        self.voices.append(speaker)
        count = n if self.returned is None else self.returned
        return [SpeechRollout([7], [8], [-0.5], {}, [0.0], True) for _ in range(count)]


def speech_parts(policy: FakeSpeechPolicy, n: int = 2) -> StepParts:
    step_parts = parts(n=n)
    step_parts.sampler = SpeechSampler(config=step_parts.config, policy=policy, rewards=None)  # type: ignore[arg-type]
    return step_parts


def spoken_prompt(index: int) -> Prepared:
    return Prepared(inputs={"input_ids": torch.tensor([[1, 2]])}, data_source="d", ground_truth="1", index=index,
                    extra_info={"spoken_text": "hello"})


def test_speech_samples_form_one_group_per_prompt_in_the_configured_voice() -> None:
    policy = FakeSpeechPolicy()
    step_parts = speech_parts(policy, n=3)
    assert isinstance(step_parts.sampler, SpeechSampler)
    step_parts.sampler.speaker = "ethan"
    rollouts = rollout_phase(step_parts, [spoken_prompt(0), spoken_prompt(0)], step=1)
    assert policy.voices == ["ethan", "ethan"]
    first, second = rollouts.group_ids[:3], rollouts.group_ids[3:]
    assert len(set(first)) == 1 and len(set(second)) == 1 and first[0] != second[0]
    assert [o.index for o in rollouts.owners] == [0] * 6


@pytest.mark.parametrize("returned", [1, 3])
def test_a_speech_policy_returning_another_count_than_n_is_refused(returned: int) -> None:
    """Groups are the prompt's samples: one sample short and the next prompt's first sample
    would join this prompt's group (or a group would silently shrink)."""
    with pytest.raises(RuntimeError, match=f"FakeSpeechPolicy.sample_speech returned {returned} samples for prompt 4"):
        rollout_phase(speech_parts(FakeSpeechPolicy(returned), n=2), [spoken_prompt(4)], step=1)


def corrected_micro_batches() -> list[Any]:
    """Two micro-batches (widths 3 and 2) of a step whose rollout disagrees with the actor on
    some tokens: rollout - actor = +0.9 (ratio e^-0.9, under 0.5) on those, 0 elsewhere."""
    from omni_training.batching import MicroBatch

    batches = []
    for mask, offsets in (
        (torch.tensor([[1, 1, 1], [1, 1, 0]]), torch.tensor([[0.0, 0.9, 0.0], [0.0, 0.0, 0.0]])),
        (torch.tensor([[1, 1], [1, 0]]), torch.tensor([[0.0, 0.0], [0.9, 0.0]])),
    ):
        old = -torch.ones(mask.shape)
        batches.append(MicroBatch(
            {"input_ids": torch.ones(2, 4, dtype=torch.long)}, torch.ones(mask.shape, dtype=torch.long), mask,
            old_log_probs=old, rollout_log_probs=(old + offsets) * mask,
        ))
    return batches


def test_rollout_correction_takes_rejected_tokens_out_of_the_micro_batches_and_their_advantages() -> None:
    """Decoupled rollout correction over the step: token k1 rejection outside 0.5..2 drops the
    two mismatched tokens from their micro-batches' masks, the token weights land on each
    micro-batch's columns, and the step's advantages are 0 on the rejected tokens (verl
    computes them after the rejection, on its mask)."""
    from omni_trainer.engines.local.step import apply_rollout_correction
    from omni_training.rollout_correction import CorrectionSettings

    micro = corrected_micro_batches()
    sampled = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 0, 0]]).float()
    settings = CorrectionSettings(rollout_is="token", rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0")
    kept, metrics = apply_rollout_correction(micro, 3, sampled, settings)
    assert torch.equal(kept, torch.tensor([[1, 0, 1], [1, 1, 0], [1, 1, 0], [0, 0, 0]]).float())
    assert torch.equal(micro[0].response_mask, torch.tensor([[1, 0, 1], [1, 1, 0]]))
    assert torch.equal(micro[1].response_mask, torch.tensor([[1, 1], [0, 0]]))
    assert micro[0].rollout_is_weights is not None and micro[1].rollout_is_weights is not None
    assert micro[0].rollout_is_weights.shape == (2, 3) and micro[1].rollout_is_weights.shape == (2, 2)
    assert float(micro[1].rollout_is_weights[1, 0]) == pytest.approx(math.exp(-0.9))
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(2 / 8)
    step_parts = parts(n=2)
    rollouts = rollout_phase(step_parts, [prompt(0), prompt(1)], step=1)
    rewards = torch.zeros(4, 3)
    rewards[:, 0] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    advantages = advantage_phase(step_parts, rollouts, TrainBatch(micro=micro, mask=kept, token_rewards=rewards))
    assert bool((advantages[kept == 0] == 0).all()) and bool((advantages[kept == 1] != 0).all())


def test_rollout_correction_refuses_samples_without_rollout_log_probs() -> None:
    from omni_trainer.engines.local.step import require_rollout_log_probs

    samples = [RolloutSample(prompt_ids=[1], response_ids=[5], response_mask=[1], response_logprobs=[-0.1]),
               RolloutSample(prompt_ids=[1], response_ids=[5], response_mask=[1])]
    with pytest.raises(ValueError, match="needs the rollout's log-probs of every sample; 1 of 2 came without them"):
        require_rollout_log_probs(samples, "rollout correction (rollout_is, rollout_rs)")
