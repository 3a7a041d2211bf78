"""The actor (omni-training) on the tiny Qwen3-Omni through its adapter (omni-qwen3):
multimodal log-probs with 3-component mrope positions, a LoRA step, and agreement between
generation-time and recomputed log-probs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from omni_contracts import get_training_adapter
from omni_training.actor import Actor
from omni_training.batching import MicroBatch, collate
from omni_training.consistency import rollout_actor_consistency
from omni_training.policy_loss import PolicyLossConfig
from omni_training.settings import ActorSettings, LoraSettings, OptimizerSettings


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    return build_tiny_qwen3_omni(tmp_path_factory.mktemp("tiny") / "ckpt", seed=0)


def prompts(tiny: Path, actor: Actor) -> tuple[Any, list[dict[str, Any]]]:
    from PIL import Image

    processor = actor.adapter.configure_processor(str(tiny), actor.model_config)
    rng = np.random.default_rng(0)
    rows = []
    for i in range(3):
        image = Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))
        tone = np.sin(2 * np.pi * (220 + 110 * i) * np.arange(16_000 * (i + 1)) / 16_000).astype(np.float32)
        content = [{"type": "image"}, {"type": "audio"}, {"type": "text", "text": f"Count to {i + 2}."}]
        text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False)
        inputs = dict(processor(text=[text], images=[image], audio=[tone], return_tensors="pt"))
        positions, _ = processor.get_rope_index(
            inputs["input_ids"], inputs["image_grid_thw"], None, inputs["attention_mask"],
            audio_seqlens=inputs["feature_attention_mask"].sum(-1),
        )
        rows.append({**inputs, "position_ids": positions})
    return processor, rows


def test_lora_actor_on_multimodal_prompts(tiny: Path) -> None:
    adapter = get_training_adapter("Qwen3OmniMoeForConditionalGeneration", "thinker")
    actor = Actor.from_pretrained(
        str(tiny), adapter, lora=LoraSettings(rank=4, alpha=8),
        settings=ActorSettings(loss_mode="gspo", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"),
                               gradient_checkpointing=False),
        optim=OptimizerSettings(lr=1e-2, weight_decay=0.0),
    )
    processor, rows = prompts(tiny, actor)
    eos = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")

    # Generation-time log-probs of the sampled tokens (temperature 1, nothing filtered).
    responses, sampled = [], []
    torch.manual_seed(0)
    with torch.no_grad():
        for row in rows:
            inputs = {k: v for k, v in row.items() if k != "position_ids"}
            out = actor.model.thinker.generate(
                **inputs, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=6,
                min_new_tokens=6, eos_token_id=eos, output_logits=True, return_dict_in_generate=True,
            )
            tokens = out.sequences[0, inputs["input_ids"].shape[1] :]
            logits = torch.stack(out.logits, dim=1)[0].float()
            responses.append(tokens)
            sampled.append(torch.log_softmax(logits, -1).gather(-1, tokens[:, None]).squeeze(-1))
    model_inputs, resp, mask = collate(rows, responses, pad_token_id=processor.tokenizer.pad_token_id)
    assert model_inputs["position_ids"].shape == (3, 3, model_inputs["input_ids"].shape[1])
    assert model_inputs["position_ids"].dtype == torch.int64
    batch = MicroBatch(model_inputs, resp, mask)
    (recomputed,) = actor.compute_log_probs([batch])
    metrics = rollout_actor_consistency(torch.stack(sampled), recomputed, mask)
    assert metrics["training/rollout_actor_probs_pearson_corr"] >= 0.999

    # A GSPO step with a positive advantage on the first sample raises its likelihood.
    batch.old_log_probs = recomputed
    batch.advantages = torch.tensor([[1.0], [-1.0], [0.0]]) * mask
    before = recomputed[0].sum()
    update = actor.update([batch])
    (after,) = actor.compute_log_probs([batch])
    assert update["actor/grad_norm"] > 0
    assert after[0].sum() > before
    (reference,) = actor.compute_log_probs([batch], reference=True)
    torch.testing.assert_close(reference, recomputed, rtol=0, atol=1e-5)  # LoRA off = the base
