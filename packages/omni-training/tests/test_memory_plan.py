"""The memory plan's arithmetic against numbers worked out by hand, and the parameter count
against what PEFT actually builds."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from omni_contracts import TrainingAdapter
from omni_training.memory_plan import (
    COLUMNS,
    ParamCounts,
    TextShape,
    Workload,
    count_text,
    fits,
    format_plan,
    memory_plan,
)
from omni_training.model_loading import apply_lora, count_parameters, load_policy
from omni_training.settings import NO_LORA, LoraSettings

# h=8, 2 layers, vocab 10, 2 heads x 4 (q 8), 1 kv head x 4 (kv 4), dense MLP of width 16.
DENSE = TextShape(hidden_size=8, num_layers=2, vocab_size=10, q_dim=8, kv_dim=4, mlp_width=16)
COUNTS = ParamCounts(total=1000, trainable_full=600, lora=50)
WORK = Workload(prompts=2, n=3, prompt_tokens=5, response_tokens=3, micro_batch=4, lora_rank=2)


def test_saved_elements_per_token_and_layer() -> None:
    # attention: 2h + 3q + 3kv = 16 + 24 + 12 = 52; dense MLP: 2h + 4w = 16 + 64 = 80
    assert DENSE.saved_per_token_layer() == 52 + 80
    moe = TextShape(hidden_size=8, num_layers=2, vocab_size=10, q_dim=8, kv_dim=4, mlp_width=16,
                    num_experts=4, experts_per_token=2)
    # MoE: 2h + 2E + k(2h + 4w) = 16 + 8 + 2 * (16 + 64) = 184
    assert moe.saved_per_token_layer() == 52 + 184


def test_lora_plan_by_hand() -> None:
    plan = memory_plan(COUNTS, DENSE, WORK, lora=True, checkpointing=False)
    assert plan["weights (LoRA bf16, full FT fp32)"] == 2000  # 1000 params x 2 B
    assert plan["trainable weights (extra, LoRA fp32)"] == 200  # 50 x 4 B
    assert plan["gradients"] == 200  # fp32
    assert plan["AdamW moments"] == 400  # 2 moments x 50 x 4 B
    # 4 rows x (5 + 3) = 32 tokens; 2 layers x 2 B x 132 elements
    assert plan["update: activations"] == 32 * 2 * 264 == 16896
    # bf16 logits of the response's 3 + 1 positions 4 x 4 x 10 x 2 = 320 (not the prompt's);
    # fp32 scores, log-softmax, entropy 4 x 3 x 10 x 4 x 3 = 1440
    assert plan["update: logits"] == 1760
    # 6 rows x 8 tokens x (k, v) x 2 layers x kv 4 x 2 B
    assert plan["rollout: KV cache"] == 1536
    assert plan["rollout: prefill logits"] == 120  # 6 rows x 10 x 2 B: the last position only
    # resident 2800 + max(update 18656, rollout 1656)
    assert plan["peak"] == 21456


def test_checkpointing_keeps_layer_inputs_and_one_layer() -> None:
    plan = memory_plan(COUNTS, DENSE, WORK, lora=True, checkpointing=True)
    # each layer's input: 32 tokens x 2 layers x 8 x 2 B = 1024; one layer recomputed: 32 x 264 = 8448
    assert plan["update: activations"] == 1024 + 8448
    assert plan["peak"] == 2800 + 9472 + 1760


def test_full_fine_tuning_keeps_fp32_weights_gradients_and_moments() -> None:
    plan = memory_plan(COUNTS, DENSE, WORK, lora=False, checkpointing=False)
    assert plan["weights (LoRA bf16, full FT fp32)"] == 4000  # 1000 params x 4 B: fp32 master weights
    assert plan["trainable weights (extra, LoRA fp32)"] == 0
    assert plan["gradients"] == 2400  # 600 x 4 B
    assert plan["AdamW moments"] == 4800  # 2 x 600 x 4 B
    assert plan["peak"] == 4000 + 2400 + 4800 + 18656


def test_verdict_and_table() -> None:
    assert fits(21776, 23670)  # 92% of 23670 = 21776.4
    assert not fits(21776, 23000)
    text = format_plan("plan", COUNTS, DENSE, WORK, 23670, chosen=COLUMNS[0])
    assert "*LoRA" in text and "fits" in text and "does not fit" in text  # full FT (29856) does not
    assert "on 0 GB (92% usable)" in text
    assert "fits" not in format_plan("plan", COUNTS, DENSE, WORK, None)  # no GPU: the plan alone
    assert count_text(31_720_000_000) == "31.72B" and count_text(13_400_000) == "13.4M" and count_text(12) == "12"


def test_shape_from_a_dense_and_a_nested_config() -> None:
    from transformers import Qwen2Config

    dense = Qwen2Config(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2)
    assert TextShape.from_config(dense) == TextShape(32, 2, 48, q_dim=32, kv_dim=16, mlp_width=64)
    text = SimpleNamespace(hidden_size=64, num_hidden_layers=2, vocab_size=4096, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
                           moe_intermediate_size=64, intermediate_size=128)
    nested = SimpleNamespace(thinker_config=SimpleNamespace(text_config=text))
    assert TextShape.from_config(nested) == TextShape(64, 2, 4096, 64, 32, 64, num_experts=4, experts_per_token=2)
    with pytest.raises(ValueError, match="lacks a size"):
        TextShape.from_config(SimpleNamespace(hidden_size=8))


def _peft_trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize(
    "lora",
    [
        LoraSettings(rank=4, alpha=8),
        LoraSettings(rank=2, alpha=16, target_modules=("q_proj", "v_proj"), exclude_modules=r".*layers\.0\..*"),
        LoraSettings(rank=3, alpha=16, target_modules=r".*\.(k_proj|o_proj)"),
    ],
    ids=["adapter-targets", "list-with-exclude", "regex"],
)
def test_parameter_count_matches_what_peft_builds(
    tiny_lm_path: Path, tiny_adapter: TrainingAdapter, lora: LoraSettings
) -> None:
    from transformers import AutoConfig

    counts = count_parameters(AutoConfig.from_pretrained(tiny_lm_path), tiny_adapter, lora)
    model, _ = load_policy(str(tiny_lm_path), tiny_adapter, NO_LORA)
    assert counts.total == counts.trainable_full == sum(p.numel() for p in model.parameters())
    assert counts.lora == _peft_trainable(apply_lora(model, tiny_adapter, lora))
    assert sum(n for _, n in counts.parts) == counts.total
    if lora.target_modules is None:
        # q 32->32 and o 32->32: 4 x 64 each; k, v 32->16: 4 x 48 each; 2 layers
        assert counts.lora == 2 * (256 + 192 + 192 + 256)
