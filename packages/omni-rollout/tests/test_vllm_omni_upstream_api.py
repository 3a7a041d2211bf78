"""The vLLM / vLLM-Omni 0.28 calls the engine makes still exist with the same shape.

test_vllm_omni_engine.py drives the engine against a fake; this module binds the exact
arguments the engine passes to the real classes' signatures, so an upstream rename or
signature change fails here, on CPU, instead of on a GPU run. Importing vllm_omni takes
one to two minutes on CPU; keep the checks in this one module. Skipped without the gpu
extra.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm_omni")


def bind(function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Raise TypeError, naming the function, if it no longer takes these arguments."""
    try:
        inspect.signature(function).bind(None, *args, **kwargs)
    except TypeError as error:
        raise AssertionError(
            f"{function.__qualname__}{inspect.signature(function)} no longer accepts "
            f"args={args} kwargs={sorted(kwargs)}: {error}. Update omni_rollout's engine."
        ) from error


def test_async_omni_takes_the_engines_calls() -> None:
    from vllm_omni.entrypoints.async_omni import AsyncOmni

    # generate is an async generator taking a per-request LoRA (the offline Omni's does not).
    assert inspect.isasyncgenfunction(AsyncOmni.generate)
    bind(AsyncOmni.generate, {"prompt_token_ids": [1]}, request_id="r",
         sampling_params_list=[None], lora_request=None)
    from vllm_omni.entrypoints.omni import Omni

    assert "lora_request" not in inspect.signature(Omni.generate).parameters, (
        "vLLM-Omni's offline Omni.generate now takes lora_request; the engine could use Omni."
    )
    # The control plane, exactly as VllmOmniEngine._execute_step calls it.
    calls: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
        "pause_generation": ((), {"mode": "abort", "clear_cache": True, "stage_ids": None}),
        "sleep": ((), {"stage_ids": None, "level": 1, "mode": "abort"}),
        "wake_up": ((), {"stage_ids": None, "tags": ["weights"]}),
        "resume_generation": ((), {"stage_ids": None}),
        "collective_rpc": (("reload_weights",), {
            "kwargs": {"weights_path": "/x", "is_checkpoint_format": True}, "stage_ids": [0]}),
    }
    for name, (args, kwargs) in calls.items():
        method = getattr(AsyncOmni, name)
        assert inspect.iscoroutinefunction(method), f"AsyncOmni.{name} is no longer async"
        bind(method, *args, **kwargs)
    assert not inspect.iscoroutinefunction(AsyncOmni.shutdown)
    bind(AsyncOmni.shutdown)


def test_stage_workers_reload_weights_from_a_path() -> None:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from vllm_omni.worker.gpu_ar_model_runner import GPUARModelRunner
    from vllm_omni.worker.gpu_ar_worker import GPUARWorker

    # collective_rpc("reload_weights", kwargs=...) reaches Worker.reload_weights, which
    # forwards to the model runner; vLLM-Omni's AR stages inherit both.
    assert callable(GPUARWorker.reload_weights)
    bind(GPUARModelRunner.reload_weights, weights_path="/x", is_checkpoint_format=True)
    assert GPUARModelRunner.reload_weights is GPUModelRunner.reload_weights, (
        "vLLM-Omni's AR model runner overrides reload_weights now; check it still loads "
        "in place from weights_path."
    )


def test_vllm_objects_the_engine_builds(tmp_path: Path) -> None:
    from vllm.sampling_params import RequestOutputKind

    from omni_rollout.vllm_omni.engine import PolicySampling, ServedLora, _final_only

    params = PolicySampling(n=4, temperature=0.7, top_k=0, max_tokens=8, seed=3,
                            stop_token_ids=(2,)).to_vllm(seed_offset=2)
    assert (params.n, params.seed, params.logprobs, params.stop_token_ids) == (1, 5, 0, [2])
    assert params.output_kind == RequestOutputKind.FINAL_ONLY
    default = type(params)(max_tokens=4)
    final = _final_only(default)
    assert final.output_kind == RequestOutputKind.FINAL_ONLY
    assert default.output_kind == RequestOutputKind.CUMULATIVE  # the engine's copy only

    lora = ServedLora("omni-rl-policy-v3", 3, tmp_path).to_vllm()
    assert (lora.lora_name, lora.lora_int_id, lora.lora_path) == (
        "omni-rl-policy-v3", 3, str(tmp_path))
