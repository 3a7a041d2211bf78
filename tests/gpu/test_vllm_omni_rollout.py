"""vLLM-Omni generates from the tiny Qwen3-Omni in thinker-only AR mode, with log-probs.

Needs a CUDA GPU and the gpu extra; skipped otherwise. Run with tests/gpu/run_gpu_smoke.sh.
The tiny thinker is widened to head_dim 64 (hidden 128, 2 heads): vLLM's attention
kernels do not all take the default tiny model's head_dim 16.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    pytest.importorskip("vllm_omni")
    from omni_contracts import get_rollout_adapter
    from omni_qwen3.tiny import TinySpec, build_tiny_qwen3_omni
    from omni_rollout.vllm_omni import DeployOptions, ReplicaLayout, VllmOmniEngine

    root = tmp_path_factory.mktemp("vllm_omni")
    spec = dataclasses.replace(TinySpec(), text_hidden_size=128, text_heads=2, text_kv_heads=2)
    model_dir = build_tiny_qwen3_omni(root / "tiny", spec=spec)
    options = DeployOptions(
        gpu_memory_utilization=0.3,
        max_num_seqs=8,
        max_model_len=512,
        enforce_eager=True,
        enable_sleep_mode=False,
        dtype="float32",
    )
    engine = VllmOmniEngine(
        model_dir,
        get_rollout_adapter("qwen3_omni_moe"),
        "thinker_only",
        layout=ReplicaLayout(),
        options=options,
        work_dir=root / "deploy",
    )
    engine.start()
    yield engine, model_dir
    engine.close()


def _prompt_ids(model_dir: Path) -> list[int]:
    from omni_qwen3.tiny.chat_template import CHAT_TEMPLATE
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    messages = [{"role": "user", "content": "Say a number."}]
    text = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, chat_template=CHAT_TEMPLATE
    )
    return list(tokenizer(text).input_ids)


def test_thinker_only_generates_with_sampled_token_logprobs(engine: tuple[Any, Path]) -> None:
    from omni_rollout.vllm_omni import EngineRequest, PolicySampling

    vllm_engine, model_dir = engine
    prompt = _prompt_ids(model_dir)
    results = vllm_engine.generate(
        [EngineRequest(prompt)], PolicySampling(n=2, max_tokens=8, seed=0, temperature=1.0)
    )
    assert len(results) == 1 and len(results[0]) == 2
    for converted in results[0]:
        sample = converted.sample
        assert sample.prompt_ids == tuple(prompt)
        assert 1 <= len(sample.response_ids) <= 8
        assert sample.response_logprobs is not None
        assert len(sample.response_logprobs) == len(sample.response_ids)
        assert all(lp <= 0.0 and math.isfinite(lp) for lp in sample.response_logprobs)
        assert converted.finish_reason in ("stop", "length")
    assert vllm_engine.deploy_path is not None and vllm_engine.deploy_path.exists()


def test_same_seed_gives_same_samples(engine: tuple[Any, Path]) -> None:
    from omni_rollout.vllm_omni import EngineRequest, PolicySampling

    vllm_engine, model_dir = engine
    request = [EngineRequest(_prompt_ids(model_dir))]
    sampling = PolicySampling(n=1, max_tokens=8, seed=123)
    first = vllm_engine.generate(request, sampling)[0][0].sample.response_ids
    second = vllm_engine.generate(request, sampling)[0][0].sample.response_ids
    assert first == second
