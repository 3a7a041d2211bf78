"""The local rollout engine (omni-rollout) on the tiny Qwen3-Omni (omni-qwen3): text, image,
audio and image+audio prompts generate from the thinker, batched into one call; sampled-token
log-probs agree with a forward pass; batched greedy decoding gives each prompt what it gets
alone; the agent loop turns the outputs into rollout samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from omni_contracts import get_rollout_adapter, get_training_adapter
from omni_rollout.agent_loops import get_agent_loop
from omni_rollout.local_engine import LocalEngine, find_policy_module
from omni_rollout.sampling import SamplingSettings

ARCH = "Qwen3OmniMoeForConditionalGeneration"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    from transformers import AutoConfig

    from omni_qwen3.tiny import build_tiny_qwen3_omni

    path = build_tiny_qwen3_omni(tmp_path_factory.mktemp("tiny") / "ckpt", seed=0)
    config = AutoConfig.from_pretrained(path)
    training = get_training_adapter(ARCH, "thinker")
    model = training.policy_class(config).from_pretrained(path).eval()
    training.configure_model(model, config)
    return model, training.configure_processor(str(path), config), config


def prompts(processor: Any) -> list[dict[str, Any]]:
    from PIL import Image

    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    wide = Image.fromarray(np.random.default_rng(1).integers(0, 256, (32, 96, 3), dtype=np.uint8))
    tone = np.sin(2 * np.pi * 440 * np.arange(16_000) / 16_000).astype(np.float32)
    chirp = np.sin(2 * np.pi * np.linspace(200, 900, 8_000) * np.arange(8_000) / 16_000).astype(np.float32)
    contents = [
        ([{"type": "text", "text": "What is 2 + 3?"}], {}),
        ([{"type": "image"}, {"type": "text", "text": "Describe it."}], {"images": [image]}),
        ([{"type": "audio"}, {"type": "text", "text": "What do you hear?"}], {"audio": [tone]}),
        # Another image size and a shorter audio than the prompt above: the batch pads audio
        # features along time and its grids differ per image.
        ([{"type": "image"}, {"type": "audio"}, {"type": "text", "text": "Both?"}], {"images": [wide], "audio": [chirp]}),
        ([{"type": "text", "text": "Hi"}], {}),
    ]
    rows = []
    for content, media in contents:
        text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False)
        rows.append(dict(processor(text=[text], return_tensors="pt", **media)))
    return rows


def test_text_image_audio_prompts_generate(setup: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    model, processor, config = setup
    adapter = get_rollout_adapter("qwen3_omni_moe")
    thinker = find_policy_module(model, adapter, "thinker_only")
    assert thinker is model.thinker
    eos = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    engine = LocalEngine(thinker, eos_token_ids=(eos,), pad_token_id=processor.tokenizer.pad_token_id)
    calls: list[int] = []
    original = thinker.generate

    def counting(**kwargs: Any) -> Any:
        calls.append(int(kwargs["input_ids"].shape[0]))
        return original(**kwargs)

    monkeypatch.setattr(thinker, "generate", counting)
    sampling = SamplingSettings(n=2, temperature=1.0, max_new_tokens=5, seed=3)
    rows = prompts(processor)
    projected: list[tuple[int, ...]] = []  # what the LM head returned per forward
    probe = thinker.lm_head.register_forward_hook(lambda m, args, out: projected.append(tuple(out.shape)))
    try:
        rollouts = engine.generate(rows, sampling)
    finally:
        probe.remove()
    # The thinker's forward takes no logits_to_keep; the engine has the head project only the
    # last position, the one generate reads, in the prefill too (not [10, L, V]).
    assert 1 <= len(projected) <= 5 and all(shape[:2] == (2 * len(rows), 1) for shape in projected)
    again = engine.generate(rows, sampling)
    assert calls == [2 * len(rows)] * 2  # every prompt, media or not, in one call
    loop = get_agent_loop("single_turn_agent")
    for row, rollout, repeat in zip(rows, rollouts, again, strict=True):
        assert [o.token_ids for o in rollout.outputs] == [o.token_ids for o in repeat.outputs]
        for output in rollout.outputs:
            sample = loop(prompt_ids=rollout.prompt_ids, outputs=[output], adapter=adapter, mode="thinker_only", specs={})
            assert 1 <= len(sample.response_ids) <= 5
            ids = torch.tensor([[*rollout.prompt_ids, *sample.response_ids]])
            forward_inputs = {k: v for k, v in row.items() if k not in ("input_ids", "attention_mask")}
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), **forward_inputs).logits
            n = len(sample.response_ids)
            expected = torch.log_softmax(logits[0, -n - 1 : -1].float(), -1).gather(
                -1, torch.tensor(sample.response_ids)[:, None]
            ).squeeze(-1)
            torch.testing.assert_close(torch.tensor(sample.response_logprobs), expected, rtol=0, atol=1e-4)


def test_batched_greedy_equals_one_prompt_at_a_time(setup: tuple[Any, Any, Any]) -> None:
    """Mixed text / image / audio / image+audio prompts of different lengths in one left-padded
    call give, with greedy decoding, the tokens and log-probs each prompt gets alone: the
    thinker's mrope positions (from the attention mask, the grids and the audio lengths) skip
    the padding, and each prompt's media reach its own placeholders."""
    model, processor, _ = setup
    thinker = find_policy_module(model, get_rollout_adapter("qwen3_omni_moe"), "thinker_only")
    eos = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    engine = LocalEngine(thinker, eos_token_ids=(eos,), pad_token_id=processor.tokenizer.pad_token_id)
    greedy = SamplingSettings(n=2, temperature=0.0, max_new_tokens=8)
    rows = prompts(processor)
    assert len({int(row["input_ids"].shape[1]) for row in rows}) == len(rows)  # every row is padded but one
    batched = engine.generate(rows, greedy)
    for row, together in zip(rows, batched, strict=True):
        (alone,) = engine.generate([row], greedy)
        assert together.prompt_ids == alone.prompt_ids
        for mixed, single in zip(together.outputs, alone.outputs, strict=True):
            assert mixed.token_ids == single.token_ids
            assert mixed.data == single.data
            torch.testing.assert_close(torch.tensor(mixed.logprobs), torch.tensor(single.logprobs), rtol=0, atol=1e-5)
