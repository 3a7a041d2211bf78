"""vLLM-Omni generates from the tiny Qwen3-Omni in thinker-only AR mode, with log-probs,
and takes weight syncs in colocated sleep mode.

Needs a CUDA GPU and the gpu extra; skipped otherwise. Run with tests/gpu/run_gpu_smoke.sh.
The tiny thinker is widened to head_dim 64 (hidden 128, 2 heads): vLLM's attention
kernels do not all take the default tiny model's head_dim 16.
"""

from __future__ import annotations

import dataclasses
import json
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
        enable_sleep_mode=True,
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


NORM = "thinker.model.norm.weight"


def _checkpoint_tensor(model_dir: Path, name: str) -> Any:
    from safetensors import safe_open

    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            if name in f.keys():
                return f.get_tensor(name)
    raise AssertionError(f"{name} is not in the checkpoint at {model_dir}")


def test_full_weight_sync_round_trip_through_sleep_and_wake(engine: tuple[Any, Path]) -> None:
    """Zero the thinker's final norm via a colocated full sync, then restore it.

    With the final RMSNorm weight at zero every hidden state is zero, so every logit is
    zero and each sampled token's raw log-prob is exactly -ln(vocab): a change no chance
    agreement can fake. Restoring the checkpoint's norm through a second sleep/wake cycle
    must give back the first samples (same seed), which also shows the other weights
    survived two level-1 sleeps (offloaded to CPU and mapped back).
    Runs last in this module: it changes the engine's weights while it runs.
    """
    from omni_contracts import get_rollout_adapter
    from omni_rollout.vllm_omni import (
        EngineRequest,
        FullWeights,
        PolicySampling,
        plan_weight_sync,
    )

    vllm_engine, model_dir = engine
    vocab = json.loads((model_dir / "config.json").read_text())["thinker_config"][
        "text_config"]["vocab_size"]
    uniform = -math.log(vocab)
    request = [EngineRequest(_prompt_ids(model_dir))]
    sampling = PolicySampling(n=2, max_tokens=8, seed=7, temperature=1.0)
    plan = plan_weight_sync(get_rollout_adapter("qwen3_omni_moe"), "thinker_only",
                            payload="full", colocated=True, sleep_level=1)

    def logprobs(results: list[Any]) -> list[float]:
        values = [lp for c in results[0] for lp in (c.sample.response_logprobs or ())]
        assert values, "no log-probs returned"
        return values

    before = vllm_engine.generate(request, sampling)
    # A random tiny model is close to uniform but not exactly (logit std ~0.2).
    assert max(abs(lp - uniform) for lp in logprobs(before)) > 1e-3

    original = _checkpoint_tensor(model_dir, NORM)
    vllm_engine.before_train(plan)
    vllm_engine.after_train(plan, FullWeights({NORM: torch.zeros_like(original)}))
    assert vllm_engine.weight_version == 1
    zeroed = vllm_engine.generate(request, sampling)
    assert all(abs(lp - uniform) < 1e-4 for lp in logprobs(zeroed)), logprobs(zeroed)

    vllm_engine.before_train(plan)
    vllm_engine.after_train(plan, FullWeights({NORM: original}))
    assert vllm_engine.weight_version == 2
    after = vllm_engine.generate(request, sampling)
    assert [c.sample.response_ids for c in after[0]] == [c.sample.response_ids for c in before[0]]
    assert logprobs(after) == pytest.approx(logprobs(before), abs=1e-4)
