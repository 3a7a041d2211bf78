"""The vLLM / vLLM-Omni 0.28 calls the driver makes still exist with the same shape, and the
undocumented behaviour ``omni_rollout.vllm_omni.compat`` relies on is still there.

test_vllm_omni_driver.py and apps/trainer/tests/engines/verl/test_verl_wiring.py (verl's server on the
driver) drive the code against fakes; this module binds the exact arguments passed (and the
recording fake's signatures) to the real classes, so an upstream rename or change fails here,
on CPU, instead of on a GPU run. Importing vllm_omni takes one to two minutes on CPU; keep the
checks in this one module. Skipped without the gpu extra.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("vllm_omni", reason="needs the gpu extra (uv sync --extra distributed --extra gpu)")


def bind(function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Raise TypeError, naming the function, if it no longer takes these arguments."""
    try:
        inspect.signature(function).bind(None, *args, **kwargs)
    except TypeError as error:
        raise AssertionError(
            f"{function.__qualname__}{inspect.signature(function)} no longer accepts "
            f"args={args} kwargs={sorted(kwargs)}: {error}. Update omni_rollout's driver."
        ) from error


def test_async_omni_takes_the_drivers_calls() -> None:
    from vllm_omni.entrypoints.async_omni import AsyncOmni

    # generate is an async generator taking a per-request LoRA, as verl's server passes it.
    assert inspect.isasyncgenfunction(AsyncOmni.generate)
    bind(AsyncOmni.generate, {"prompt_token_ids": [1]}, request_id="r",
         sampling_params_list=[None], lora_request=None, priority=0)
    # The control plane, exactly as VllmOmniDriver calls it.
    calls: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
        "pause_generation": ((), {"mode": "abort", "clear_cache": True, "stage_ids": None}),
        "sleep": ((), {"stage_ids": None, "level": 1, "mode": "abort"}),
        "wake_up": ((), {"stage_ids": None, "tags": ["weights"]}),
        "resume_generation": ((), {"stage_ids": None}),
        "is_paused": ((), {}),
        "is_sleeping": ((), {}),
        "abort": (("r",), {}),
        "reset_mm_cache": ((), {}),
        "start_profile": ((), {"profile_prefix": None}),
        "stop_profile": ((), {}),
        "collective_rpc": ((), {"method": "update_weights_from_ipc", "timeout": None, "args": (),
                                "kwargs": {"use_shm": False}, "stage_ids": [0]}),
    }
    for name, (args, kwargs) in calls.items():
        method = getattr(AsyncOmni, name)
        assert inspect.iscoroutinefunction(method), f"AsyncOmni.{name} is no longer async"
        bind(method, *args, **kwargs)
    assert not inspect.iscoroutinefunction(AsyncOmni.shutdown)
    bind(AsyncOmni.shutdown)


def test_final_only_reports_once_on_a_copy() -> None:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    from omni_rollout.vllm_omni.driver import final_only

    default = SamplingParams(max_tokens=4)
    final = final_only(default)
    assert final.output_kind == RequestOutputKind.FINAL_ONLY
    assert default.output_kind == RequestOutputKind.CUMULATIVE  # the driver's copy only


# ---- the recording fake and the compat module -------------------------------------------


def test_the_recording_fake_takes_what_the_real_async_omni_takes() -> None:
    """Each fake method's parameters are the real method's (names, kinds, defaults), so
    the CPU tests cannot call AsyncOmni in a way it would refuse."""
    from vllm_omni.entrypoints.async_omni import AsyncOmni

    from omni_rollout.vllm_omni.testing import RecordingAsyncOmni

    state = {f.name for f in dataclasses.fields(RecordingAsyncOmni)} | {"names"}
    methods = {name: fake for name, fake in vars(RecordingAsyncOmni).items()
               if inspect.isfunction(fake) and not name.startswith("_") and name not in state}
    assert len(methods) == 15, sorted(methods)
    for name, fake in methods.items():
        real = inspect.signature(getattr(AsyncOmni, name)).parameters
        for parameter in inspect.signature(fake).parameters.values():
            assert parameter.name in real, f"AsyncOmni.{name} has no parameter {parameter.name!r}"
            upstream = real[parameter.name]
            assert (parameter.kind, parameter.default) == (upstream.kind, upstream.default), (
                f"AsyncOmni.{name}({parameter.name}) is {upstream}; the fake says {parameter}")


def test_compat_request_states_is_asyncomnis_in_flight_table() -> None:
    from vllm_omni.entrypoints.async_omni import AsyncOmni
    from vllm_omni.entrypoints.client_request_state import ClientRequestState
    from vllm_omni.entrypoints.omni_base import OmniBase

    assert "self.request_states: dict[str, ClientRequestState] = {}" in inspect.getsource(OmniBase.__init__)
    generate = inspect.getsource(AsyncOmni.generate)
    assert "self.request_states[request_id] = req_state" in generate  # registered per request ...
    assert "self._log_summary_and_cleanup(request_id)" in generate  # ... and removed when it ends
    assert "self.request_states.pop(request_id" in inspect.getsource(OmniBase._log_summary_and_cleanup)
    # An entry carries the caller's id, which AsyncOmni.abort matches.
    assert "external_request_id" in inspect.signature(ClientRequestState.__init__).parameters
    assert "s.external_request_id in request_ids" in inspect.getsource(AsyncOmni.abort)


def test_compat_rpc_failure_shape_is_the_stage_pools() -> None:
    from vllm_omni.engine.stage_pool import StagePool

    from omni_rollout.vllm_omni.compat import rpc_failures

    source = inspect.getsource(StagePool.collective_rpc)
    assert '"supported": False' in source and '"error": error' in source
    assert rpc_failures([[None], {"supported": False, "error": "x"}, {"todo": True}]) == [
        {"supported": False, "error": "x"}]


def test_compat_lora_reaches_stage_zero_only() -> None:
    from vllm_omni.engine.async_omni_engine import AsyncOmniEngine

    from omni_rollout.vllm_omni.compat import LORA_STAGE_ID

    assert LORA_STAGE_ID == 0
    # generate's lora_request goes into stage 0's input processing, with stage 0's params.
    source = inspect.getsource(AsyncOmniEngine._build_add_request_message)
    assert "params = effective_sampling_params_list[0]" in source
    assert "self.input_processor.process_inputs(" in source and "lora_request=lora_request," in source


def test_compat_cache_clearing_goes_through_pause_generation() -> None:
    """Why the driver clears caches with pause_generation: AsyncOmni's reset_prefix_cache and
    reset_encoder_cache only log, while pause_generation reaches EngineCore.pause_scheduler,
    which resets the prefix, mm and encoder caches once idle. When upstream implements the
    resets, this fails: call them directly instead."""
    from vllm.v1.engine.core import EngineCore, EngineCoreProc
    from vllm_omni.engine.stage_pool import StagePool
    from vllm_omni.entrypoints.async_omni import AsyncOmni

    for name in ("reset_prefix_cache", "reset_encoder_cache"):
        assert "not yet supported" in inspect.getsource(getattr(AsyncOmni, name)), name
    pause = inspect.getsource(AsyncOmni.pause_generation)
    assert '"pause_scheduler"' in pause and '"clear_cache": clear_cache' in pause
    assert "pause_scheduler" in StagePool._ENGINE_CORE_CONTROL_ASYNC_METHODS  # to EngineCore, not workers
    assert "self._reset_caches()" in inspect.getsource(EngineCore.pause_scheduler)
    assert "engine._reset_caches()" in inspect.getsource(EngineCoreProc.pause_scheduler)
    reset = inspect.getsource(EngineCore._reset_caches)
    assert all(f"self.{call}(" in reset for call in ("reset_prefix_cache", "reset_mm_cache", "reset_encoder_cache"))
    resume = inspect.getsource(AsyncOmni.resume_generation)
    assert '"resume_scheduler"' in resume and "self._paused = False" in resume


def test_compat_sleep_facts_the_driver_relies_on() -> None:
    """wake_up keeps AsyncOmni's admission gate closed after an AR sleep (the driver resumes
    once nothing sleeps, as vLLM's EngineCore.wake_up does) and cannot wake from level 2."""
    from vllm.v1.engine.core import EngineCore
    from vllm_omni.entrypoints.async_omni import AsyncOmni

    from omni_rollout.vllm_omni.compat import MAX_SLEEP_LEVEL

    wake = inspect.getsource(AsyncOmni.wake_up)
    assert "_hold_admission_until_resume" in wake
    assert "_level2_sleeping" in wake and "NotImplementedError" in wake and MAX_SLEEP_LEVEL == 1
    assert "self._hold_admission_until_resume = True" in inspect.getsource(AsyncOmni.sleep)
    assert "self.resume_scheduler()" in inspect.getsource(EngineCore.wake_up)
    assert "clear_prefix_cache = level >= 1" in inspect.getsource(EngineCore.sleep)


def test_compat_frontend_mm_cache_lives_on_the_renderer_where_async_omni_does_not_look() -> None:
    """``AsyncOmni.reset_mm_cache`` reads ``mm_processor_cache`` off the input processor; vLLM
    0.28 keeps it on the processor's renderer (with ``clear_mm_cache``), and its engine core
    answers a media hash it no longer has with a retryable ``finish_reason='error'`` and no
    tokens. The driver clears the renderer's cache itself (``compat.clear_frontend_mm_cache``)."""
    from vllm.renderers.base import BaseRenderer
    from vllm.v1.engine import FinishReason
    from vllm.v1.engine.core import EngineCoreProc
    from vllm.v1.engine.input_processor import InputProcessor
    from vllm_omni.entrypoints.async_omni import AsyncOmni

    reset = inspect.getsource(AsyncOmni.reset_mm_cache)
    assert 'getattr(processor, "mm_processor_cache", None)' in reset
    assert "mm_processor_cache" not in inspect.getsource(InputProcessor.__init__)
    assert "self.renderer" in inspect.getsource(InputProcessor)
    assert callable(BaseRenderer.clear_mm_cache) and isinstance(BaseRenderer.mm_processor_cache, property)
    miss = inspect.getsource(EngineCoreProc._handle_mm_cache_miss)
    assert "new_token_ids=[]" in miss and "finish_reason=FinishReason.ERROR" in miss
    assert str(FinishReason.ERROR) == "error"
