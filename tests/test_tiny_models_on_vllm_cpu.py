"""Each tiny model loads through vLLM's model loader (vLLM-Omni's, on vLLM's CPU build) and the
engine's thinker computes what transformers' does.

The tiny checkpoints carry every config key vLLM's and vLLM-Omni's thinker classes read
(``vision_config.image_size`` and ``apply_vit_abs_pos_embed``, ``text_config.tie_word_embeddings``)
and heads vLLM's CPU attention takes (head_dim 32): vLLM-Omni starts each one in its
``thinker_only`` pipeline from the checkpoint (``load_format=auto``), samples 8 tokens of a
text prompt in fp32, and their log-probs equal transformers' thinker on the same ids. Needs
the cpu-rollout extra; one engine start a model (about a minute on 2 cores).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow
NEW_TOKENS = 8


def _tiny_qwen3() -> tuple[Path, str, Any]:
    from transformers import Qwen3OmniMoeThinkerForConditionalGeneration

    from omni_qwen3.tiny import build_tiny_qwen3_omni

    return build_tiny_qwen3_omni(), "qwen3_omni_moe", Qwen3OmniMoeThinkerForConditionalGeneration


def _tiny_qwen25() -> tuple[Path, str, Any]:
    from transformers import Qwen2_5OmniThinkerForConditionalGeneration

    from omni_qwen25.tiny import build_tiny_qwen25_omni

    return build_tiny_qwen25_omni(), "qwen2_5_omni", Qwen2_5OmniThinkerForConditionalGeneration


@pytest.mark.parametrize("family", [_tiny_qwen3, _tiny_qwen25], ids=["qwen3-omni", "qwen2.5-omni"])
def test_the_tiny_model_loads_in_vllm_omni_and_agrees_with_transformers(
    family: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("vllm_omni", reason="needs the cpu-rollout extra (uv sync --extra cpu-rollout)")
    if importlib.util.find_spec("omni_vllm_cpu") is None:
        pytest.skip("needs the cpu-rollout extra (uv sync --extra cpu-rollout)")
    import torch
    from transformers import AutoProcessor
    from vllm import SamplingParams
    from vllm_omni.entrypoints.omni import Omni

    from omni_contracts import get_rollout_adapter
    from omni_rollout.vllm_omni import DeployOptions, ReplicaLayout, build_deploy_config, write_deploy_config

    model_dir, pipeline, thinker_class = family()
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    options = DeployOptions(max_num_seqs=2, max_model_len=256, enforce_eager=True, enable_sleep_mode=False,
                            dtype="float32", extra_policy_args={"load_format": "auto"})
    deploy = build_deploy_config(get_rollout_adapter(pipeline), "thinker_only", ReplicaLayout(), options)
    path = write_deploy_config(deploy, tmp_path / "deploy.yaml")
    processor = AutoProcessor.from_pretrained(model_dir)
    text = processor.apply_chat_template([{"role": "user", "content": [{"type": "text", "text": "What is 2 + 3?"}]}],
                                         add_generation_prompt=True, tokenize=False)
    prompt = list(processor.tokenizer(text).input_ids)

    omni = Omni(model=str(model_dir), deploy_config=str(path))
    try:
        (output,) = list(omni.generate([{"prompt_token_ids": prompt}],
                                       SamplingParams(max_tokens=NEW_TOKENS, temperature=1.0, logprobs=0, seed=3,
                                                      ignore_eos=True)))
    finally:
        omni.close()
    completion = output.outputs[0]
    response = list(completion.token_ids)
    assert len(response) == NEW_TOKENS
    engine = [step[token].logprob for step, token in zip(completion.logprobs, response, strict=True)]

    thinker = thinker_class.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = thinker(input_ids=torch.tensor([prompt + response])).logits[0].float()
    log_probs = torch.log_softmax(logits, dim=-1)
    expected = [log_probs[len(prompt) - 1 + i, token].item() for i, token in enumerate(response)]
    assert engine == pytest.approx(expected, abs=1e-5)
