"""vLLM-Omni generates from the tiny Qwen3-Omni in thinker-only AR mode, with log-probs,
through the one driver (also under verl's own ``generate``), clears its caches, and takes
weight syncs in colocated sleep mode (a change of weights the rollout must show).

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


def test_cache_clearing_really_runs_and_leaves_the_engine_generating(engine: tuple[Any, Path]) -> None:
    """The driver's reset_prefix_cache (AsyncOmni's own only logs) pauses the policy stage with
    clear_cache=True and resumes it: it returns, the engine is not left paused, and the same
    seed samples the same tokens after it (a cleared prefix cache changes no result)."""
    from omni_rollout.vllm_omni import EngineRequest, PolicySampling

    vllm_engine, model_dir = engine
    request = [EngineRequest(_prompt_ids(model_dir))]
    sampling = PolicySampling(n=1, max_tokens=8, seed=5)
    before = vllm_engine.generate(request, sampling)[0][0].sample.response_ids

    async def clear(driver: Any) -> tuple[bool, bool]:
        cleared = await driver.reset_prefix_cache(reset_connector=True)
        await driver.reset_encoder_cache()
        return cleared, await driver.is_paused()

    assert vllm_engine.run(clear) == (True, False)
    assert vllm_engine.generate(request, sampling)[0][0].sample.response_ids == before


def test_verls_own_generate_runs_on_the_real_driver(engine: tuple[Any, Path]) -> None:
    """verl's vLLMHttpServer.generate (unchanged, as our verl replica runs it) on the driver of a
    real AsyncOmni: vLLM-Omni's output passes through verl's extraction with log-probs."""
    pytest.importorskip("verl")
    from types import SimpleNamespace

    from verl.workers.rollout.replica import RolloutMode
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

    class Config(SimpleNamespace):
        def get(self, key: str, default: Any = None) -> Any:
            return getattr(self, key, default)

    vllm_engine, model_dir = engine
    prompt = _prompt_ids(model_dir)
    server: Any = object.__new__(vLLMHttpServer)
    server.config = Config(max_model_len=512, prompt_length=256, response_length=8, full_determinism=True, seed=3,
                           repetition_penalty=1.1, ignore_eos=True, enable_rollout_routing_replay=False, mtp=None)
    server.model_config = SimpleNamespace(lora_rank=0, lora={}, processor=None)
    server.replica_rank, server.node_rank, server.global_steps = 0, 0, 1
    server.rollout_mode = RolloutMode.COLOCATED
    server._disaggregation_role, server._pd_decode_peers = "null", []
    server._submission_paused, server._rejecting, server._admitting = False, False, 0

    async def generate(driver: Any) -> Any:
        server.engine = driver
        return await server.generate(prompt_ids=list(prompt), sampling_params={"temperature": 1.0, "logprobs": True},
                                     request_id="verl-gpu-0")

    first, second = vllm_engine.run(generate), vllm_engine.run(generate)
    # ignore_eos: exactly response_length tokens; full_determinism: the same seed, the same tokens.
    assert len(first.token_ids) == 8 and first.stop_reason == "completed"
    assert first.log_probs is not None and len(first.log_probs) == 8
    assert all(lp <= 0.0 and math.isfinite(lp) for lp in first.log_probs)
    assert second.token_ids == first.token_ids


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
