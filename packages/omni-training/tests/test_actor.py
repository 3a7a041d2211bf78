"""The actor on a tiny causal LM built offline (CPU, fp32)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from omni_contracts import ExtraFieldError, TrainingAdapter
from omni_training.actor import Actor
from omni_training.batching import MicroBatch, collate
from omni_training.checkpoint import checkpoint_dirs, latest_checkpoint, load_checkpoint, save_checkpoint
from omni_training.consistency import rollout_actor_consistency
from omni_training.merge import merge_lora
from omni_training.policy_loss import PolicyLossConfig
from omni_training.settings import NO_LORA, ActorSettings, LoraSettings, OptimizerSettings

SETTINGS = ActorSettings(
    loss_mode="vanilla", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"), gradient_checkpointing=False
)
OPTIM = OptimizerSettings(lr=1e-6)
LORA = LoraSettings(rank=4, alpha=8)
FAST = OptimizerSettings(lr=5e-3, weight_decay=0.0)


def make_batch(seed: int = 0, rows: int = 4) -> MicroBatch:
    g = torch.Generator().manual_seed(seed)
    prompts = []
    responses = []
    for i in range(rows):
        p = 3 + i % 3
        ids = torch.randint(2, 48, (1, p), generator=g)
        prompts.append({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
        responses.append(torch.randint(2, 48, (2 + i % 4,), generator=g).tolist())
    inputs, resp, mask = collate(prompts, responses, pad_token_id=0)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5][:rows]).unsqueeze(-1) * mask
    return MicroBatch(inputs, resp, mask, advantages=advantages)


def split(batch: MicroBatch, parts: list[slice]) -> list[MicroBatch]:
    return [
        MicroBatch(
            {k: v[s] for k, v in batch.model_inputs.items()}, batch.responses[s], batch.response_mask[s],
            old_log_probs=None if batch.old_log_probs is None else batch.old_log_probs[s],
            advantages=None if batch.advantages is None else batch.advantages[s],
        )
        for s in parts
    ]


def surrogate(actor: Actor, batch: MicroBatch) -> float:
    """The fixed objective the update pushes down: -mean(A * log pi)."""
    (logp,) = actor.compute_log_probs([batch])
    assert batch.advantages is not None
    return float(-(batch.advantages * logp).sum() / batch.response_mask.sum())


@pytest.mark.parametrize("lora", [LORA, NO_LORA], ids=["lora", "full"])
def test_updates_reduce_a_fixed_loss(tiny_lm_path: Path, tiny_adapter: TrainingAdapter, lora: LoraSettings) -> None:
    torch.manual_seed(0)  # LoRA's A init and the batch must not depend on which tests ran before
    actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=lora, optim=FAST)
    batch = make_batch()
    (batch.old_log_probs,) = actor.compute_log_probs([batch])
    before = surrogate(actor, batch)
    metrics = [actor.update([batch]) for _ in range(8)]
    assert surrogate(actor, batch) < before - 1e-3
    assert metrics[0]["actor/grad_norm"] > 0 and metrics[0]["actor/skipped_step"] == 0.0
    assert metrics[0]["actor/pg_clipfrac"] == 0.0  # ratio 1 on the first step: nothing clipped
    # later steps move the ratio past the clip (LoRA's zero-initialised B moves it more slowly)
    assert any(m["actor/pg_clipfrac"] > 0.0 for m in metrics[1:])
    assert metrics[0]["actor/entropy"] > 0


def test_lora_trains_only_the_adapter(tiny_lm_path: Path, tiny_adapter: TrainingAdapter) -> None:
    actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=LORA, optim=OPTIM)
    names = [n for n, p in actor.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    assert {n.split(".")[-4] for n in names} == {"q_proj", "k_proj", "v_proj", "o_proj"}  # x.q_proj.lora_A.default.weight


def test_reference_is_the_base_model(tiny_lm_path: Path, tiny_adapter: TrainingAdapter) -> None:
    from transformers import AutoModelForCausalLM

    batch = make_batch(1)
    base = AutoModelForCausalLM.from_pretrained(tiny_lm_path)
    base_actor = Actor(base, tiny_adapter, base.config, SETTINGS, FAST)
    (expected,) = base_actor.compute_log_probs([batch])
    for lora in (LORA, NO_LORA):
        actor = Actor.from_pretrained(
            str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=lora, optim=FAST, keep_reference=True
        )
        (batch.old_log_probs,) = actor.compute_log_probs([batch])
        actor.update([batch])
        actor.update([batch])
        (reference,) = actor.compute_log_probs([batch], reference=True)
        (current,) = actor.compute_log_probs([batch])
        mask = batch.response_mask.bool()
        torch.testing.assert_close(reference[mask], expected[mask], rtol=0, atol=1e-6)
        assert not torch.allclose(current[mask], expected[mask], atol=1e-4)


def test_full_parameter_reference_must_be_kept(tiny_lm_path: Path, tiny_adapter: TrainingAdapter) -> None:
    actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=NO_LORA, optim=FAST)
    batch = make_batch(1)
    (batch.old_log_probs,) = actor.compute_log_probs([batch], reference=True)  # before any update: fine
    actor.update([batch])
    with pytest.raises(ValueError, match=r"kept only with use_kl_loss or keep_reference=True"):
        actor.compute_log_probs([batch], reference=True)


def test_micro_batches_accumulate_to_the_full_batch(tiny_lm_path: Path, tiny_adapter: TrainingAdapter) -> None:
    batch = make_batch(2)
    whole = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=NO_LORA, optim=FAST)
    parts = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=NO_LORA, optim=FAST)
    (batch.old_log_probs,) = whole.compute_log_probs([batch])
    m_whole = whole.update([batch])
    m_parts = parts.update(split(batch, [slice(0, 1), slice(1, 4)]))
    assert m_parts["actor/pg_loss"] == pytest.approx(m_whole["actor/pg_loss"], abs=1e-6)
    assert m_parts["actor/grad_norm"] == pytest.approx(m_whole["actor/grad_norm"], rel=1e-5)
    # Adam's first step is about lr * sign(grad): float noise on near-zero grads can flip
    # a sign, so parameters agree to a few lr-scaled ulps, not bitwise.
    for p, q in zip(whole.model.parameters(), parts.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-5)


@pytest.mark.parametrize("loss_mode", ["vanilla", "gspo"])
def test_on_policy_update_takes_old_log_probs_from_its_own_forward(
    tiny_lm_path: Path, tiny_adapter: TrainingAdapter, loss_mode: str
) -> None:
    """One pass fewer, the same step: the update's detached log-probs equal a separate
    pass's, and loss, gradients and parameters follow."""
    settings = replace(SETTINGS, loss_mode=loss_mode)
    def make() -> Actor:
        torch.manual_seed(0)  # the same LoRA initialisation for both
        return Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, lora=LORA, optim=FAST, settings=settings)

    separate, fused = make(), make()
    recomputed = split(make_batch(3), [slice(0, 2), slice(2, 4)])
    for mb, old in zip(recomputed, separate.compute_log_probs(recomputed), strict=True):
        mb.old_log_probs = old
    on_policy = split(make_batch(3), [slice(0, 2), slice(2, 4)])
    m_separate = separate.update(recomputed)
    m_fused = fused.update(on_policy, on_policy=True)
    for mb, reference in zip(on_policy, recomputed, strict=True):
        assert mb.old_log_probs is not None and mb.old_log_probs.device.type == "cpu"
        torch.testing.assert_close(mb.old_log_probs, reference.old_log_probs, rtol=0, atol=1e-6)
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/ppo_kl", "actor/pg_clipfrac"):
        assert m_fused[key] == pytest.approx(m_separate[key], rel=1e-5, abs=1e-7), key
    for p, q in zip(separate.model.parameters(), fused.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="already set"):
        fused.update(on_policy, on_policy=True)  # old log-probs of an earlier policy: not on-policy


def test_generation_log_probs_match_the_actor(tiny_lm_path: Path, tiny_adapter: TrainingAdapter) -> None:
    from transformers import GenerationConfig

    actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=LORA, optim=OPTIM)
    torch.manual_seed(0)
    prompt = torch.randint(2, 48, (6, 5))
    generation = GenerationConfig(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=12,
        eos_token_id=None, pad_token_id=0,
    )
    with torch.no_grad():
        out = actor.model.generate(
            input_ids=prompt, attention_mask=torch.ones_like(prompt), generation_config=generation,
            output_logits=True, return_dict_in_generate=True,
        )
    responses = out.sequences[:, prompt.shape[1] :]
    logits = torch.stack(out.logits, dim=1).float()  # [B, T, V]
    sampled = torch.log_softmax(logits, -1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)
    prompts = [{"input_ids": row[None], "attention_mask": torch.ones(1, 5, dtype=torch.long)} for row in prompt]
    inputs, resp, mask = collate(prompts, list(responses), pad_token_id=0)
    (recomputed,) = actor.compute_log_probs([MicroBatch(inputs, resp, mask)])
    metrics = rollout_actor_consistency(sampled, recomputed, mask)
    assert metrics["training/rollout_actor_probs_pearson_corr"] >= 0.999
    assert abs(metrics["rollout_corr/log_ppl_diff"]) < 1e-4


def test_extra_fields_are_validated_per_micro_batch(
    tiny_lm_path: Path, tiny_adapter_with_extra_field: TrainingAdapter
) -> None:
    actor = Actor.from_pretrained(
        str(tiny_lm_path), tiny_adapter_with_extra_field, settings=SETTINGS, lora=LORA, optim=OPTIM
    )
    batch = make_batch(3, rows=2)
    lengths = batch.response_mask.sum(-1).tolist()
    batch.extra = {"tiny.trace": [[0] * int(n) for n in lengths]}  # response_length each
    actor.compute_log_probs([batch])
    batch.extra = {"tiny.trace": [[0] * int(lengths[0]), [0]]}
    with pytest.raises(ExtraFieldError, match=r"micro-batch row 1: extra field 'tiny.trace' has shape \(1\)"):
        actor.compute_log_probs([batch])
    batch.extra = {}
    with pytest.raises(ExtraFieldError, match=r"required extra fields \(tiny.trace\)"):
        actor.compute_log_probs([batch])


@pytest.mark.parametrize("lora", [LORA, NO_LORA], ids=["lora", "full"])
def test_resume_continues_exactly(
    tmp_path: Path, tiny_lm_path: Path, tiny_adapter: TrainingAdapter, lora: LoraSettings
) -> None:
    def fresh() -> Actor:
        torch.manual_seed(123)
        return Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=lora, optim=FAST)

    batches = [make_batch(seed) for seed in (4, 5)]

    def step(actor: Actor, batch: MicroBatch) -> dict[str, float]:
        (batch.old_log_probs,) = actor.compute_log_probs([batch])
        noise = torch.rand(())  # consumes RNG: the restored RNG state must match too
        metrics = actor.update([batch])
        return {**metrics, "noise": float(noise)}

    uninterrupted = fresh()
    step(uninterrupted, batches[0])
    expected = step(uninterrupted, batches[1])

    interrupted = fresh()
    step(interrupted, batches[0])
    save_checkpoint(tmp_path, 1, interrupted, {"data_position": 4})
    del interrupted  # the process dies between steps
    torch.manual_seed(999)  # a new process has another RNG state

    resumed = fresh()
    state = load_checkpoint(latest_checkpoint(tmp_path), resumed)  # type: ignore[arg-type]
    assert state == {"step": 1, "state": {"data_position": 4}}
    got = step(resumed, batches[1])
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/lr", "noise"):
        assert got[key] == pytest.approx(expected[key], rel=1e-6, abs=1e-7), key
    for p, q in zip(uninterrupted.model.parameters(), resumed.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6)


def test_checkpoints_are_atomic_and_pruned(tmp_path: Path, tiny_lm_path: Path, tiny_adapter: TrainingAdapter) -> None:
    actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=LORA, optim=OPTIM)
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, actor, keep_last=2)
    assert [p.name for p in checkpoint_dirs(tmp_path)] == ["step_000002", "step_000003"]

    def crash(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    actor.optimizer.state_dict = crash  # type: ignore[method-assign]
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, 4, actor)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000002", "step_000003"]
    with pytest.raises(FileNotFoundError, match=r"not a complete checkpoint: missing \['rng.pt'\]"):
        (tmp_path / "step_000003" / "rng.pt").unlink()
        load_checkpoint(tmp_path / "step_000003", actor)


def test_full_checkpoint_refused_by_a_lora_actor(tmp_path: Path, tiny_lm_path: Path, tiny_adapter: TrainingAdapter) -> None:
    full = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=NO_LORA, optim=OPTIM)
    path = save_checkpoint(tmp_path, 1, full)
    lora = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=LORA, optim=OPTIM)
    with pytest.raises(ValueError, match=r"holds full weights but the actor trains LoRA"):
        load_checkpoint(path, lora)


def test_lora_adapter_loads_in_peft_and_merges(tmp_path: Path, tiny_lm_path: Path, tiny_adapter: TrainingAdapter) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=LORA, optim=FAST)
    batch = make_batch(6)
    (batch.old_log_probs,) = actor.compute_log_probs([batch])
    actor.update([batch])
    checkpoint = save_checkpoint(tmp_path / "run", 1, actor)
    reloaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_lm_path), checkpoint / "adapter")
    merged_dir = merge_lora(tiny_lm_path, checkpoint / "adapter", tmp_path / "merged", auto_class="AutoModelForCausalLM")
    merged = AutoModelForCausalLM.from_pretrained(merged_dir)
    ids = batch.model_inputs["input_ids"]
    with torch.no_grad():
        trained = actor.model.eval()(input_ids=ids).logits
        torch.testing.assert_close(reloaded.eval()(input_ids=ids).logits, trained, rtol=0, atol=1e-5)
        torch.testing.assert_close(merged.eval()(input_ids=ids).logits, trained, rtol=0, atol=1e-4)
    with pytest.raises(FileExistsError, match="choose a new directory"):
        merge_lora(tiny_lm_path, checkpoint / "adapter", merged_dir, auto_class="AutoModelForCausalLM")


def test_kl_loss_uses_the_reference(tiny_lm_path: Path, tiny_adapter: TrainingAdapter) -> None:
    settings = replace(SETTINGS, use_kl_loss=True, kl_loss_coef=0.1, kl_loss_type="low_var_kl")
    actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, lora=NO_LORA, settings=settings, optim=FAST)
    batch = make_batch(7)
    (batch.old_log_probs,) = actor.compute_log_probs([batch])
    (batch.ref_log_probs,) = actor.compute_log_probs([batch], reference=True)
    first = actor.update([batch])
    second = actor.update([batch])
    assert first["actor/kl_loss"] == pytest.approx(0.0, abs=1e-7)  # policy == reference at step 0
    assert second["actor/kl_loss"] > 0.0
    batch.ref_log_probs = None
    with pytest.raises(ValueError, match="use_kl_loss is on but a micro-batch has no ref_log_probs"):
        actor.update([batch])


def test_learning_rate_warmup_then_cosine(tiny_lm_path: Path, tiny_adapter: TrainingAdapter) -> None:
    optim = OptimizerSettings(lr=1.0, warmup_steps=2, schedule="cosine", total_steps=6, min_lr_ratio=0.1)
    actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=LORA, optim=optim)
    factors = [actor._lr_factor(step) for step in range(7)]
    # warmup 1/2, 2/2; then cosine from 1 down to 0.1 over the remaining 4 steps.
    assert factors[:3] == pytest.approx([0.5, 1.0, 1.0])
    assert factors[4] == pytest.approx(0.1 + 0.9 * 0.5)
    assert factors[6] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="cosine schedule needs total_steps"):
        OptimizerSettings(lr=1e-6, schedule="cosine")


def test_the_entropy_bonus_reaches_the_gradient_and_the_metric_alone_does_not(
    tiny_lm_path: Path, tiny_adapter: TrainingAdapter
) -> None:
    """With zero advantages the only loss term is ``-entropy_coeff * entropy``: coefficient 0
    moves nothing (the entropy is a metric, outside autograd), a positive one raises it."""
    entropies = {}
    for coeff in (0.0, 1.0):
        torch.manual_seed(0)
        actor = Actor.from_pretrained(
            str(tiny_lm_path), tiny_adapter, lora=NO_LORA, settings=replace(SETTINGS, entropy_coeff=coeff),
            optim=FAST,
        )
        batch = make_batch(3)
        assert batch.advantages is not None
        batch.advantages = torch.zeros_like(batch.advantages)
        (batch.old_log_probs,) = actor.compute_log_probs([batch])
        metrics = [actor.update([batch]) for _ in range(3)]
        entropies[coeff] = [m["actor/entropy"] for m in metrics]
        if coeff:
            assert metrics[0]["actor/grad_norm"] > 0
        else:
            assert all(m["actor/grad_norm"] == 0 for m in metrics)
    assert entropies[0.0][0] == pytest.approx(entropies[1.0][0], rel=1e-6)  # same start
    assert entropies[1.0][-1] > entropies[1.0][0] and entropies[0.0][-1] == pytest.approx(entropies[0.0][0], rel=1e-6)


def test_an_objective_update_accumulates_as_one_batch_and_lowers_its_objective(
    tiny_lm_path: Path, tiny_adapter: TrainingAdapter
) -> None:
    """``update_objective``: the micro-batches' shares add up to the whole batch's gradient,
    the objective's metrics are summed under ``actor/``, and repeated steps lower it."""
    batch = make_batch(rows=4)

    def objective(micro: MicroBatch, log_probs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        loss = -(log_probs * micro.response_mask).sum() / batch.response_mask.sum()  # this share of the mean
        return loss, {"objective": float(loss.detach())}

    grads = []
    for parts in ([slice(0, 4)], [slice(0, 1), slice(1, 3), slice(3, 4)]):
        torch.manual_seed(0)
        actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=NO_LORA,
                                      optim=OptimizerSettings(lr=0.0, weight_decay=0.0, grad_clip=1e9))
        metrics = actor.update_objective(split(batch, parts), objective)
        grads.append(metrics["actor/grad_norm"])
        whole = metrics["actor/objective"]
    assert grads[0] == pytest.approx(grads[1], rel=1e-4) and grads[0] > 0
    torch.manual_seed(0)
    actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=LORA, optim=FAST)
    first = actor.update_objective([batch], objective)
    for _ in range(6):
        last = actor.update_objective([batch], objective)
    assert first["actor/objective"] == pytest.approx(whole, rel=1e-4)
    assert last["actor/objective"] < first["actor/objective"] - 1e-3 and last["actor/skipped_step"] == 0.0


def offsets_like(log_probs: torch.Tensor) -> torch.Tensor:
    """A fixed rollout-minus-actor mismatch per token: -0.8 .. 0.8."""
    cols = torch.arange(log_probs.shape[1])
    rows = torch.arange(log_probs.shape[0])[:, None]
    return torch.tensor([-0.8, -0.2, 0.0, 0.3, 0.8])[(2 * rows + cols) % 5]


def test_bypass_mode_trains_on_the_rollout_log_probs_without_the_rejected_tokens(
    tiny_lm_path: Path, tiny_adapter: TrainingAdapter
) -> None:
    """Bypass (ppo_clip): the rollout's log-probs are the old ones, and the tokens the rejection
    drops (current policy against the rollout, token k1 outside 0.5..2) leave the loss -- the
    same step as a plain update on the rollout's log-probs with those tokens masked by hand."""
    from omni_training.rollout_correction import CorrectionSettings, correct

    settings = CorrectionSettings(rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0", bypass_mode=True)
    bypass = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, lora=NO_LORA, optim=FAST,
                                   settings=replace(SETTINGS, bypass_correction=settings))
    plain = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=NO_LORA, optim=FAST)
    batch = make_batch(3)
    (current,) = plain.compute_log_probs([batch])
    rollout = (current + offsets_like(current)) * batch.response_mask
    batch.rollout_log_probs = batch.old_log_probs = rollout
    kept = correct(current, rollout, batch.response_mask.float(), settings).mask
    assert 0 < int(kept.sum()) < int(batch.response_mask.sum())  # some tokens, not all, rejected
    by_hand = MicroBatch(batch.model_inputs, batch.responses, batch.response_mask, old_log_probs=rollout,
                         advantages=batch.advantages)
    metrics = bypass.update([batch])
    plain_metrics = _update_with_mask(plain, by_hand, kept)
    assert metrics["actor/pg_loss"] == pytest.approx(plain_metrics["actor/pg_loss"], abs=1e-6)
    assert metrics["actor/grad_norm"] == pytest.approx(plain_metrics["actor/grad_norm"], rel=1e-5)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(
        1 - float(kept.sum() / batch.response_mask.sum()), abs=1e-6)


def _update_with_mask(actor: Actor, batch: MicroBatch, kept: torch.Tensor) -> dict[str, float]:
    """An update whose policy loss sees ``kept`` while the batch totals are the sampled mask's,
    as in bypass mode: the loss is given the kept tokens, the normalisation the sampled ones."""
    from omni_training.policy_loss import get_policy_loss

    loss_fn = actor.loss_fn
    actor.loss_fn = lambda **kwargs: loss_fn(**{**kwargs, "response_mask": kept})  # type: ignore[assignment]
    try:
        return actor.update([batch])
    finally:
        actor.loss_fn = get_policy_loss(actor.settings.loss_mode)


def test_bypass_reinforce_weights_the_policy_gradient(tiny_lm_path: Path, tiny_adapter: TrainingAdapter) -> None:
    """Bypass with loss_type=reinforce: ``-w * A * log pi`` over the mini-batch's tokens, ``w``
    the truncated ratio of the current policy to the rollout."""
    from omni_training.policy_loss import BatchCounts, reinforce_loss
    from omni_training.rollout_correction import CorrectionSettings, correct

    settings = CorrectionSettings(rollout_is="token", rollout_is_threshold=1.5, bypass_mode=True, loss_type="reinforce")
    actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, lora=NO_LORA, optim=FAST,
                                  settings=replace(SETTINGS, bypass_correction=settings))
    batch = make_batch(4)
    (current,) = actor.compute_log_probs([batch])
    batch.rollout_log_probs = batch.old_log_probs = (current + offsets_like(current)) * batch.response_mask
    mask = batch.response_mask.float()
    correction = correct(current, batch.rollout_log_probs, mask, settings)
    assert correction.weights is not None and correction.weights.max() == pytest.approx(1.5)
    assert batch.advantages is not None
    expected = reinforce_loss(
        rollout_log_prob=batch.rollout_log_probs, log_prob=current, advantages=batch.advantages, response_mask=mask,
        config=PolicyLossConfig(loss_agg_mode="token-mean"), counts=BatchCounts(num_tokens=float(mask.sum())),
        rollout_is_weights=correction.weights,
    )
    metrics = actor.update([batch])
    assert metrics["actor/pg_loss"] == pytest.approx(float(expected.loss), abs=1e-6)
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(1.5)
    assert metrics["actor/pg_clipfrac"] == 0.0


def test_a_save_that_runs_out_of_disk_says_so_and_keeps_the_last_checkpoint(
    tmp_path: Path, tiny_lm_path: Path, tiny_adapter: TrainingAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk gave two torch tracebacks ("PytorchStreamWriter failed writing file") and no
    word of disk space."""
    import errno
    import shutil

    import omni_training.checkpoint as checkpoint
    from omni_training.checkpoint import CheckpointSpaceError, checkpoint_bytes

    actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=NO_LORA, optim=OPTIM)
    save_checkpoint(tmp_path, 1, actor)
    needed = checkpoint_bytes(actor)
    assert needed >= sum(p.numel() * 4 for p in actor.model.parameters())  # fp32 weights at least

    def torch_writer_fails(*_args: Any, **_kwargs: Any) -> None:  # what torch.save raises on a full disk
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 128 vs 0\n"
                           "PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(checkpoint.torch, "save", torch_writer_fails)
    monkeypatch.setattr(checkpoint.shutil, "disk_usage", lambda _path: shutil._ntuple_diskusage(10**9, 10**9, 0))  # type: ignore[attr-defined]
    with pytest.raises(CheckpointSpaceError, match=rf"no space left on {tmp_path}: 0 MB free, a checkpoint needs about "
                                                   rf"{needed / 2**20:.0f} MB; step 2 was not saved \(step_000001 is intact\)"):
        save_checkpoint(tmp_path, 2, actor)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000001"]  # the staging directory is gone

    def python_write_fails(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.undo()
    monkeypatch.setattr(checkpoint.torch, "save", python_write_fails)
    with pytest.raises(CheckpointSpaceError, match="no space left on"):  # however much the disk says is free
        save_checkpoint(tmp_path, 2, actor)
    monkeypatch.undo()
    save_checkpoint(tmp_path, 2, actor)  # with space again, the step saves
