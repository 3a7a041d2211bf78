"""The talker conditioning the actor rebuilds (rollout mode ``talker``) against vLLM-Omni's own
thinker -> talker prefill code, run on CPU on the tiny Qwen3-Omni's modules.

vLLM-Omni 0.28 builds the talker's prefill in ``Qwen3OmniMoeForConditionalGeneration.
_thinker_to_talker_prefill`` (and counts its length for the talker's placeholder prompt in
``stage_input_processors.qwen3_omni._compute_talker_prompt_ids_length``). Both run here
unchanged, as methods of a stand-in holding our tiny model's projections and codec
embedding, fed the thinker's embeddings and hidden states for the whole request as
transformers computes them (vLLM-Omni's own thinker capture differs at media positions,
vllm-project/vllm-omni#3184; these chats are text), packed by vLLM-Omni's
``thinker2talker_full_payload``. Ours: the actor's rebuild from the ``talker_source_ids`` the
rollout adapter stored for the same request. Over a generated set of chats -- system prompt
or not, earlier turns, answers of 1 to 12 tokens -- the prefill embeddings, the text stream,
the text-pad embedding and the prefill length must agree (vLLM-Omni computes in bf16:
compared to bf16 precision).
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

pytest.importorskip("vllm_omni", reason="needs the gpu extra (vllm-omni): uv sync --extra gpu")

pytestmark = pytest.mark.slow

WORDS = ("three", "apples", "and", "two", "pears", "the", "cat", "sat", "on", "a", "mat", "today", "sun")
REAL_ROLE_IDS = {"im_start": 151644, "system": 8948, "user": 872, "assistant": 77091}
"""What vLLM-Omni's placeholder-length count hard-codes (the real checkpoint's token ids)."""


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from omni_qwen3.talker_policy import Qwen3OmniTalkerPolicy
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    path = build_tiny_qwen3_omni(tmp_path_factory.mktemp("tiny") / "ckpt", seed=0)
    return Qwen3OmniTalkerPolicy.from_pretrained(path).eval()


@pytest.fixture(scope="module")
def tokenizer(policy: Any) -> Any:
    from omni_qwen3.talker_adapter import Qwen3OmniTalkerAdapter

    path = Path(policy.config._name_or_path)
    return Qwen3OmniTalkerAdapter().configure_processor(str(path), policy.config)


class UpstreamPrefill(torch.nn.Module):
    """vLLM-Omni's thinker -> talker prefill methods, bound to bf16 copies of our tiny model's
    modules (vLLM-Omni builds the prefill in bf16 and requires it)."""

    def __init__(self, policy: Any) -> None:
        from vllm_omni.model_executor.models.qwen3_omni.qwen3_omni import Qwen3OmniMoeForConditionalGeneration as Up

        super().__init__()
        self.config = policy.config
        self.thinker_config = policy.config.thinker_config
        self.talker = torch.nn.Module()
        self.talker.text_projection = copy.deepcopy(policy.talker.text_projection).bfloat16()
        self.talker.hidden_projection = copy.deepcopy(policy.talker.hidden_projection).bfloat16()
        self.talker.embed_input_ids = copy.deepcopy(policy.talker.get_input_embeddings()).bfloat16()
        self.prefill = Up._thinker_to_talker_prefill.__get__(self)
        for name in ("_get_talker_user_parts", "_get_talker_assistant_parts", "_get_tts_embed"):
            setattr(self, name, getattr(Up, name).__get__(self))
        self._module_device = Up._module_device


def chats(seed: int = 0, count: int = 8) -> list[tuple[list[dict[str, Any]], list[str]]]:
    rng = random.Random(seed)
    corpus = []
    for index in range(count):
        messages: list[dict[str, Any]] = []
        if index % 2:
            messages.append({"role": "system", "content": [{"type": "text", "text": "Be brief."}]})
        for _ in range(rng.randint(0, 1)):  # an earlier exchange the talker does not see
            messages.append({"role": "user", "content": [{"type": "text", "text": " ".join(rng.choices(WORDS, k=3))}]})
            messages.append({"role": "assistant", "content": [{"type": "text", "text": " ".join(rng.choices(WORDS, k=2))}]})
        messages.append({"role": "user", "content": [{"type": "text", "text": " ".join(rng.choices(WORDS, k=rng.randint(1, 6)))}]})
        corpus.append((messages, rng.choices(WORDS, k=rng.randint(1, 12))))
    return corpus


def close(ours: torch.Tensor, upstream: torch.Tensor) -> bool:
    """Equal to bf16 precision (vLLM-Omni builds the prefill in bf16)."""
    ours, upstream = ours.float(), upstream.float()
    return ours.shape == upstream.shape and bool(((ours - upstream).abs() <= 1e-2 * ours.abs().max() + 1e-3).all())


def source_from_the_adapter(prompt: list[int], sampled: list[int]) -> torch.Tensor:
    """``talker_source_ids`` as the rollout adapter stores it for a request whose thinker
    sampled ``sampled`` after ``prompt`` (the talker's side is a stand-in: one token)."""
    from omni_contracts import RolloutSample, StageOutput
    from omni_qwen3.rollout_adapter import Qwen3OmniRolloutAdapter
    from omni_qwen3.talker_fields import SOURCE_IDS

    outputs = [
        StageOutput(0, tuple(sampled), data={"prompt_token_ids": tuple(prompt)}),
        StageOutput(1, (5,), (-1.0,), data={"prompt_token_ids": (0,) * 9,
                                            "multimodal_output": {"codes": {"audio": torch.zeros(9, 4)}}}),
    ]
    sample = RolloutSample(tuple(prompt), (5,), (1,), (-1.0,))
    adapted = Qwen3OmniRolloutAdapter().postprocess_agent_loop_output(sample, outputs, "talker")
    return adapted.extra_fields[SOURCE_IDS]  # type: ignore[return-value]


@pytest.mark.parametrize("case", range(8))
def test_rebuilt_conditioning_is_vllm_omnis(policy: Any, tokenizer: Any, case: int) -> None:
    from vllm_omni.model_executor.stage_input_processors.qwen3_omni import (
        _compute_talker_prompt_ids_length,
        thinker2talker_full_payload,
    )

    messages, answer_words = chats()[case]
    config = policy.config
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt = tokenizer.tokenizer(text)["input_ids"]
    sampled = tokenizer.tokenizer.encode(" ".join(answer_words)) + [config.im_end_token_id]
    everything = torch.tensor([prompt + sampled])

    with torch.no_grad():
        # vLLM-Omni's side: the thinker's rows for every token of the request (taken to include
        # the final one, as thinker2talker_full_payload expects), packed by vLLM-Omni itself.
        out = policy.thinker(input_ids=everything, attention_mask=torch.ones_like(everything), output_hidden_states=True)
        request = SimpleNamespace(request_id="r", prompt_token_ids=prompt, all_token_ids=prompt + sampled,
                                  additional_information=None)
        payload = thinker2talker_full_payload(None, {
            "hidden_states.layer_0": out.hidden_states[0][0],
            "hidden_states.layer_24": out.hidden_states[config.talker_config.accept_hidden_layer][0],
        }, request)
        tts = policy.thinker.get_input_embeddings()(
            torch.tensor([[config.tts_bos_token_id, config.tts_eos_token_id, config.tts_pad_token_id]])
        ).chunk(3, dim=1)
        upstream = UpstreamPrefill(policy)
        ids, embeds, upstream_trailing = upstream.prefill(
            thinker_embed=payload["embed"]["prefill"].bfloat16(),
            thinker_hidden=payload["hidden_states"]["output"].bfloat16(),
            multimodal_mask=None,
            input_ids=torch.tensor([payload["ids"]["prompt"]]),
            thinker_result_ids=torch.tensor(payload["ids"]["all"]),
            speaker_id=config.talker_config.speaker_id[policy.speakers[0]],
            tts_bos_thinker=tts[0].bfloat16(), tts_eos_thinker=tts[1].bfloat16(), tts_pad_thinker=tts[2].bfloat16(),
        )
        # Ours: the actor's rebuild from the source the rollout adapter stored.
        source = source_from_the_adapter(prompt, sampled)
        prefill, prefill_ids, _, trailing, tts_pad = policy.talker_prefill(source[None], policy.speakers[0], {})
    assert close(prefill, embeds), (prefill.shape, embeds.shape)
    assert close(trailing, upstream_trailing), (trailing.shape, upstream_trailing.shape)
    assert close(tts_pad, upstream.tts_pad_embed.reshape(-1))
    assert ids.tolist() == prefill_ids.tolist()

    # The talker's placeholder prompt, as vLLM-Omni counts it with the real checkpoint's ids.
    real = {getattr(config, f"{role}_token_id"): real_id for role, real_id in REAL_ROLE_IDS.items()}
    relabel = [real.get(t, t) for t in prompt]
    info = {"ids": {"all": relabel + sampled, "prompt": relabel}}
    assert _compute_talker_prompt_ids_length(info, device="cpu") == prefill.shape[0]
