"""The actor on one device: micro-batches move to the model's device, bf16 loading (fp32
master weights for a full fine-tune), and gradient checkpointing (same loss and gradients,
layers run twice). CPU, tiny causal LM."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from omni_contracts import TrainingAdapter
from omni_training.actor import Actor
from omni_training.batching import MicroBatch, TeacherLogProbs, collate
from omni_training.model_loading import Precision, precision
from omni_training.policy_loss import PolicyLossConfig
from omni_training.settings import NO_LORA, ActorSettings, LoraSettings, OptimizerSettings

SETTINGS = ActorSettings(
    loss_mode="vanilla", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"), gradient_checkpointing=False
)
LORA = LoraSettings(rank=4, alpha=8)
FAST = OptimizerSettings(lr=5e-3, weight_decay=0.0)


def make_batch(rows: int = 4) -> MicroBatch:
    g = torch.Generator().manual_seed(0)
    prompts = []
    for i in range(rows):
        ids = torch.randint(2, 48, (1, 3 + i % 3), generator=g)
        prompts.append({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    responses = [torch.randint(2, 48, (2 + i % 4,), generator=g).tolist() for i in range(rows)]
    inputs, resp, mask = collate(prompts, responses, pad_token_id=0)
    return MicroBatch(inputs, resp, mask, advantages=torch.tensor([1.0, -1.0, 0.5, -0.5][:rows]).unsqueeze(-1) * mask)


def test_micro_batch_moves_every_tensor() -> None:
    batch = make_batch()
    batch.old_log_probs = torch.zeros(batch.responses.shape)
    batch.teacher = TeacherLogProbs(torch.zeros(batch.responses.shape))
    assert batch.to("cpu") is batch  # already there: no copy
    moved = batch.to("meta")
    tensors = [*moved.model_inputs.values(), moved.responses, moved.response_mask, moved.old_log_probs,
               moved.advantages, moved.teacher.log_probs]  # type: ignore[union-attr]
    assert all(t.device.type == "meta" for t in tensors)
    assert moved.ref_log_probs is None and moved.extra is batch.extra
    assert batch.responses.device.type == "cpu"  # the original is untouched
    # Media features follow the model's dtype; ids, masks and log-probs keep theirs.
    batch.model_inputs["input_features"] = torch.zeros(4, 2, 3)
    assert batch.to("cpu", float_dtype=torch.float32) is batch
    cast = batch.to("cpu", float_dtype=torch.bfloat16)
    assert cast.model_inputs["input_features"].dtype == torch.bfloat16
    assert cast.model_inputs["input_ids"].dtype == torch.long and cast.old_log_probs.dtype == torch.float32  # type: ignore[union-attr]


def test_actor_moves_batches_to_its_device_and_returns_cpu_log_probs(
    tiny_lm_path: Path, tiny_adapter: TrainingAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=NO_LORA, optim=FAST)
    moved_to: list[torch.device] = []
    real_to = MicroBatch.to

    def spy(self: MicroBatch, device: torch.device | str, **kwargs: object) -> MicroBatch:
        moved_to.append(torch.device(device))
        assert kwargs == {"float_dtype": torch.float32}  # the model's
        return real_to(self, device, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(MicroBatch, "to", spy)
    batch = make_batch()
    (batch.old_log_probs,) = actor.compute_log_probs([batch])
    actor.update([batch])
    assert moved_to == [torch.device("cpu")] * 2  # once for the log-probs, once for the update
    assert batch.old_log_probs.device.type == "cpu"
    assert actor.device == torch.device("cpu")


def test_bfloat16_policy_trains_with_fp32_log_probs(tiny_lm_path: Path, tiny_adapter: TrainingAdapter) -> None:
    """What a GPU run loads (``actor.dtype`` auto = bfloat16 there), run on the CPU."""
    with torch.random.fork_rng():  # LoRA's initialisation leaves other tests' RNG untouched
        torch.manual_seed(0)
        actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=replace(SETTINGS, dtype="bfloat16"),
                                      lora=LORA, optim=FAST)
    base = next(p for n, p in actor.model.named_parameters() if "q_proj.base_layer" in n)
    lora = next(p for n, p in actor.model.named_parameters() if "lora_A" in n)
    assert base.dtype == torch.bfloat16 and lora.dtype == torch.float32  # PEFT keeps adapters in fp32
    batch = make_batch()
    (batch.old_log_probs,) = actor.compute_log_probs([batch])
    assert batch.old_log_probs.dtype == torch.float32
    metrics = actor.update([batch])
    assert metrics["actor/grad_norm"] > 0 and metrics["actor/skipped_step"] == 0.0
    assert actor.autocast_dtype is None  # the bf16 base computes in bf16 by itself
    moments = [t for p in actor.trainable for t in actor.optimizer.state[p].values() if t.dim() > 0]
    assert moments and {t.dtype for t in moments} == {torch.float32}  # AdamW's state follows the adapter


def test_precision_keeps_trained_weights_in_fp32() -> None:
    # actor.dtype is the compute dtype; what is trained (and its AdamW state) stays fp32.
    assert precision("bfloat16", lora=False) == Precision(weights="float32", compute="bfloat16")
    assert precision("bfloat16", lora=False).autocast == torch.bfloat16
    assert precision("bfloat16", lora=True) == Precision(weights="bfloat16", compute="bfloat16")  # frozen base
    assert precision("bfloat16", lora=True).autocast is None
    for lora in (False, True):  # the CPU's float32: unchanged
        assert precision("float32", lora=lora) == Precision("float32", "float32")
        assert precision("float32", lora=lora).autocast is None
    with pytest.raises(ValueError, match="valid: float32, bfloat16"):
        precision("float16", lora=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_small_adamw_step_survives_only_in_fp32(dtype: torch.dtype) -> None:
    """Why a full fine-tune keeps fp32 weights: 0.01 lies in [2**-7, 2**-6), where bf16's
    spacing is 2**-7 * 2**-7 = 6.1e-5; Adam's first step is lr = 3e-6, a twentieth of it, and
    rounds back to 0.01. fp32's spacing there is 2**-7 * 2**-23 = 9.3e-10."""
    weight = torch.nn.Parameter(torch.full((4,), 0.01, dtype=dtype))
    optimizer = torch.optim.AdamW([weight], lr=3e-6, weight_decay=0.0)
    start = weight.detach().clone()
    weight.grad = torch.ones_like(weight)
    optimizer.step()
    moved = float((start.float() - weight.detach().float()).abs().max())
    if dtype == torch.float32:
        assert moved == pytest.approx(3e-6, rel=1e-3)
    else:
        assert moved == 0.0


def test_full_fine_tune_in_bf16_keeps_fp32_master_weights_and_learns(
    tiny_lm_path: Path, tiny_adapter: TrainingAdapter
) -> None:
    """``actor.dtype=bfloat16`` (a GPU's auto) with LoRA off, on the CPU: the weights load in
    fp32, the forward computes in bf16, and a 3e-6 step moves (nearly) every weight."""
    actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=replace(SETTINGS, dtype="bfloat16"),
                                  lora=NO_LORA, optim=OptimizerSettings(lr=3e-6, weight_decay=0.0))
    assert {p.dtype for p in actor.model.parameters()} == {torch.float32}
    assert actor.autocast_dtype == torch.bfloat16
    q_proj = actor.model.model.layers[0].self_attn.q_proj
    computed: list[torch.dtype] = []
    q_proj.register_forward_hook(lambda _m, _i, out: computed.append(out.dtype))
    batch = make_batch()
    (batch.old_log_probs,) = actor.compute_log_probs([batch])
    assert batch.old_log_probs.dtype == torch.float32 and computed == [torch.bfloat16]
    before = q_proj.weight.detach().clone()
    metrics = actor.update([batch])
    assert metrics["actor/skipped_step"] == 0.0
    moved = (q_proj.weight.detach() - before).abs()
    # |w| ~ 0.02 (the init's std): bf16 weights would keep all but the few smallest elements
    # (|w| below ~8e-4, a few percent); fp32 moves every one with a gradient by ~lr.
    assert float((moved > 0).float().mean()) > 0.99
    assert float(moved.max()) == pytest.approx(3e-6, rel=0.05)
    moments = [t for p in actor.trainable for t in actor.optimizer.state[p].values() if t.dim() > 0]
    assert {t.dtype for t in moments} == {torch.float32}


def decoder_layer_calls(actor: Actor) -> list[int]:
    """Counts forward entries of the first decoder layer (a pre-hook: a checkpointed
    recompute stops early, before forward hooks would fire)."""
    calls: list[int] = []
    layer = next(m for m in actor.model.modules() if type(m).__name__ == "Qwen2DecoderLayer")
    layer.register_forward_pre_hook(lambda *_: calls.append(1))
    return calls


@pytest.mark.parametrize("lora", [LORA, NO_LORA], ids=["lora", "full"])
def test_gradient_checkpointing_changes_memory_not_the_step(
    tiny_lm_path: Path, tiny_adapter: TrainingAdapter, lora: LoraSettings
) -> None:
    results = {}
    for checkpointing in (False, True):
        with torch.random.fork_rng():  # the same LoRA initialisation; other tests' RNG untouched
            torch.manual_seed(0)
            actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, lora=lora, optim=FAST,
                                          settings=replace(SETTINGS, gradient_checkpointing=checkpointing))
        batch = make_batch()
        (batch.old_log_probs,) = actor.compute_log_probs([batch])
        calls = decoder_layer_calls(actor)
        metrics = actor.update([batch])
        results[checkpointing] = (metrics, len(calls), [p.detach().clone() for p in actor.trainable])
    (plain, plain_calls, plain_params), (ckpt, ckpt_calls, ckpt_params) = results[False], results[True]
    assert (plain_calls, ckpt_calls) == (1, 2)  # the backward recomputed the layer
    assert ckpt["actor/pg_loss"] == pytest.approx(plain["actor/pg_loss"], abs=1e-6)
    assert ckpt["actor/grad_norm"] == pytest.approx(plain["actor/grad_norm"], rel=1e-5)
    for p, q in zip(plain_params, ckpt_params, strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-5)
