"""The actor scores the masked distribution the rollout sampled from (``omni_training.logit_mask``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from omni_contracts import LogitMask, TrainingAdapter
from omni_training.actor import Actor
from omni_training.batching import MicroBatch, collate
from omni_training.consistency import rollout_actor_consistency
from omni_training.kl import entropy_from_logits
from omni_training.logit_mask import mask_logits, masked_ids
from omni_training.policy_loss import PolicyLossConfig
from omni_training.settings import NO_LORA, ActorSettings, LoraSettings, OptimizerSettings


def test_masked_ids_get_no_probability_and_the_entropy_stays_finite() -> None:
    mask = LogitMask(6, (1, 3))
    assert masked_ids(mask, 8) == (1, 3, 6, 7)  # the banned ids and the head's tail
    logits = torch.randn(2, 3, 8, requires_grad=True)
    masked = mask_logits(logits, mask)
    probs = torch.softmax(masked, -1)
    assert bool((probs[..., [1, 3, 6, 7]] == 0).all())
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3))
    entropy = entropy_from_logits(masked)
    assert bool(torch.isfinite(entropy).all())
    entropy.sum().backward()
    assert logits.grad is not None and bool(torch.isfinite(logits.grad).all())
    assert bool((logits.grad[..., [1, 3, 6, 7]] == 0).all())
    with pytest.raises(ValueError, match="mask was built for another stage"):
        mask_logits(torch.zeros(1, 4), mask)


@pytest.mark.parametrize("lora", [LoraSettings(rank=4, alpha=8), NO_LORA], ids=["lora", "full"])
def test_the_actor_and_its_reference_score_what_a_suppressing_sampler_drew(
    tiny_lm_path: Path, tiny_adapter: TrainingAdapter, lora: LoraSettings
) -> None:
    """A sampler that never draws some ids reports log-probs renormalised without them; the
    actor recomputing over the whole vocabulary is off by log(1 - P(those ids)) per token."""
    from transformers import GenerationConfig

    settings = ActorSettings(  # use_kl_loss: a full fine-tune keeps a frozen reference copy
        loss_mode="vanilla", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"), use_kl_loss=True,
        gradient_checkpointing=False,
    )
    actor = Actor.from_pretrained(
        str(tiny_lm_path), tiny_adapter, lora=lora, settings=settings, optim=OptimizerSettings(lr=1e-6)
    )
    width = int(actor.model.get_output_embeddings().weight.shape[0])
    banned = tuple(range(2, width, 3))  # a third of the vocabulary: a bias no rounding hides
    torch.manual_seed(0)
    prompt = torch.randint(2, 48, (6, 5))
    generation = GenerationConfig(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=12, eos_token_id=None, pad_token_id=0,
        suppress_tokens=list(banned),
    )
    with torch.no_grad():
        out = actor.model.generate(
            input_ids=prompt, attention_mask=torch.ones_like(prompt), generation_config=generation,
            output_scores=True, return_dict_in_generate=True,
        )
    responses = out.sequences[:, prompt.shape[1] :]
    assert not bool(torch.isin(responses, torch.tensor(banned)).any())
    sampled = torch.log_softmax(torch.stack(out.scores, 1).float(), -1).gather(-1, responses[..., None])[..., 0]
    prompts = [{"input_ids": row[None], "attention_mask": torch.ones(1, 5, dtype=torch.long)} for row in prompt]
    inputs, resp, mask = collate(prompts, list(responses), pad_token_id=0)
    batch = MicroBatch(inputs, resp, mask)

    (unmasked,) = actor.compute_log_probs([batch])
    assert rollout_actor_consistency(sampled, unmasked, mask)["rollout_corr/log_ppl_diff"] > 0.1
    actor.mask_logits(LogitMask(width, banned))
    for reference in (False, True):  # nothing is updated yet: the reference is the policy
        (recomputed,) = actor.compute_log_probs([batch], reference=reference)
        metrics = rollout_actor_consistency(sampled, recomputed, mask)
        assert abs(metrics["rollout_corr/log_ppl_diff"]) < 1e-5, (reference, metrics)
        assert metrics["training/rollout_actor_probs_pearson_corr"] >= 0.9999
