"""The thinker policy's encoders see each distinct image and audio of a call once, with the
logits and gradients of encoding every copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from omni_qwen3.media_dedup import DedupPlan, plan_dedup, repeat_rows


def prompt(processor: Any, media: Any, seed: int, hz: float) -> Any:
    messages = [{"role": "user", "content": [
        {"type": "image"}, {"type": "audio"}, {"type": "text", "text": "How many tones?"},
    ]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return processor(text=[text], images=[media.picture(seed=seed)], audio=[media.tone(1.0, hz)], return_tensors="pt")


def repeated_batch(tiny_path: Path, tiny_config: Any, media: Any, order: list[int]) -> dict[str, Any]:
    """Rows of two prompts (different picture and tone, same length) in ``order``."""
    from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter

    processor = Qwen3OmniThinkerAdapter().configure_processor(str(tiny_path), tiny_config)
    prompts = [prompt(processor, media, seed=0, hz=440.0), prompt(processor, media, seed=1, hz=880.0)]
    assert prompts[0]["input_ids"].shape == prompts[1]["input_ids"].shape
    return {key: torch.cat([prompts[i][key] for i in order]) for key in prompts[0]}


def encoded_rows(module: Any) -> list[int]:
    """Rows each call of ``module`` received (its first argument)."""
    seen: list[int] = []
    module.register_forward_pre_hook(lambda m, args: seen.append(int(args[0].shape[0])))
    return seen


def test_repeated_media_are_encoded_once_with_the_same_logits(
    policy_model: Any, full_model: Any, tiny_path: Path, tiny_config: Any, media: Any
) -> None:
    batch = repeated_batch(tiny_path, tiny_config, media, [0, 1, 0, 0, 1, 1])
    patches = encoded_rows(policy_model.thinker.visual.patch_embed)
    chunks = encoded_rows(policy_model.thinker.audio_tower.conv2d1)
    with torch.no_grad():
        ours = policy_model(**batch).logits
        reference = full_model.thinker(**batch).logits  # the checkpoint's own class: no hooks
    per_image = int(batch["image_grid_thw"][0].prod())
    assert patches == [2 * per_image]  # two distinct pictures, not six
    assert sum(chunks) == 2 * int((batch["feature_attention_mask"][0].sum() + 99) // 100)  # 100-frame chunks
    torch.testing.assert_close(ours, reference, rtol=0, atol=1e-5)


def test_gradients_of_repeated_media_add_up_as_if_each_copy_were_encoded(
    policy_model: Any, full_model: Any, tiny_path: Path, tiny_config: Any, media: Any
) -> None:
    batch = repeated_batch(tiny_path, tiny_config, media, [1, 0, 1])
    grads = []
    for model, thinker in ((policy_model, policy_model.thinker), (full_model.thinker, full_model.thinker)):
        model.train()
        logits = model(**batch).logits
        (logits * torch.linspace(-1, 1, logits.shape[-1])).sum().backward()
        grads.append([
            thinker.visual.patch_embed.proj.weight.grad.clone(),
            thinker.audio_tower.conv2d1.weight.grad.clone(),
        ])
    for ours, reference in zip(*grads, strict=True):
        assert reference.abs().sum() > 0
        torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-5)


def test_distinct_media_pass_through_untouched(policy_model: Any, tiny_path: Path, tiny_config: Any, media: Any) -> None:
    batch = repeated_batch(tiny_path, tiny_config, media, [0, 1])
    frames = encoded_rows(policy_model.thinker.audio_tower.conv2d1)
    with torch.no_grad():
        policy_model(**batch)
    lengths = batch["feature_attention_mask"].sum(-1)
    assert sum(frames) == int(((lengths + 99) // 100).sum())  # every 100-frame chunk of both audios


def test_plan_groups_equal_items_only() -> None:
    a, b = torch.ones(3, 2), torch.arange(6.0).reshape(3, 2)
    same_sum = torch.tensor([[0.0, 15.0], [0.0, 0.0], [0.0, 0.0]])  # equal sum to b, different values
    plan = plan_dedup([a, b, a, same_sum, b, torch.ones(2, 3)])
    assert plan == DedupPlan(sources=(0, 1, 0, 2, 1, 3), distinct=(0, 1, 3, 5))
    # Equal values under different keys (an image's grid read another way) stay apart.
    assert plan_dedup([a, a], keys=["[1, 2, 3]", "[1, 3, 2]"]).distinct == (0, 1)


def test_repeat_rows_refuses_row_counts_that_do_not_add_up() -> None:
    plan = DedupPlan(sources=(0, 1, 0), distinct=(0, 1))
    rows = torch.arange(5.0)[:, None]
    assert repeat_rows(rows, [2, 3], plan)[:, 0].tolist() == [0, 1, 2, 3, 4, 0, 1]
    with pytest.raises(RuntimeError, match=r"returned 5 rows for distinct items of \[2, 2\] rows"):
        repeat_rows(rows, [2, 2], plan)
