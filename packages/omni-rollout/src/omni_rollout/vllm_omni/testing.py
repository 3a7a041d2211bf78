"""A recording stand-in for ``vllm_omni.AsyncOmni`` 0.28, for CPU tests of the driver and its callers.

Every method takes the arguments the real one takes (``test_vllm_omni_upstream_api.py`` binds
each against ``AsyncOmni``), records the call, and keeps the state the driver reads: the
admission gate (``is_paused``), sleeping tags (``is_sleeping``) and the in-flight table
(``request_states``, an entry per running ``generate``, keyed ``<request_id>-fake``).
What ``generate`` yields comes from ``respond(prompt, sampling_params_list, request_id)``,
after ``hold`` (an ``asyncio.Event``, when given) is set.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

Respond = Callable[[dict[str, Any], list[Any], str], Sequence[Any]]


@dataclass
class RecordingAsyncOmni:
    """Records ``(method, kwargs)`` in ``calls``; see the module docstring."""

    default_sampling_params_list: list[Any]
    respond: Respond = lambda prompt, params, request_id: ()
    rpc_results: dict[str, list[Any]] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    request_states: dict[str, Any] = field(default_factory=dict)
    paused: bool = False
    sleeping: set[str] = field(default_factory=set)
    hold: asyncio.Event | None = None

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    @property
    def input_processor(self) -> Any:
        """The frontend's input processor: its renderer's multimodal cache records a clear as
        ``frontend clear_mm_cache``."""
        calls = self.calls

        class Renderer:
            mm_processor_cache = object()

            def clear_mm_cache(self) -> None:
                calls.append(("frontend clear_mm_cache", {}))

        return SimpleNamespace(renderer=Renderer())

    async def generate(
        self,
        prompt: dict[str, Any],
        sampling_params: Any = None,
        request_id: str = "",
        *,
        lora_request: Any = None,
        sampling_params_list: Sequence[Any] | None = None,
        priority: int = 0,
    ) -> AsyncIterator[Any]:
        params = list(sampling_params_list or ())
        self.calls.append(("generate", {"prompt": prompt, "request_id": request_id,
                                        "sampling_params_list": params, "lora_request": lora_request,
                                        "priority": priority}))
        internal = f"{request_id}-fake"
        self.request_states[internal] = SimpleNamespace(request_id=internal, external_request_id=request_id)
        try:
            if self.hold is not None:
                await self.hold.wait()
            for output in self.respond(prompt, params, request_id):
                yield output
        finally:
            self.request_states.pop(internal, None)

    async def abort(self, request_id: str | Iterable[str]) -> None:
        self.calls.append(("abort", {"request_id": request_id}))

    async def collective_rpc(self, method: str, timeout: float | None = None, args: tuple[Any, ...] = (),
                             kwargs: dict[str, Any] | None = None,
                             stage_ids: list[int] | None = None) -> list[Any]:
        self.calls.append(("collective_rpc", {"method": method, "args": args, "kwargs": kwargs,
                                              "stage_ids": stage_ids}))
        return self.rpc_results.get(method, [[None]])

    async def pause_generation(self, *, mode: str = "abort", wait_for_inflight_requests: bool = False,
                               clear_cache: bool = True, stage_ids: list[int] | None = None) -> None:
        self.calls.append(("pause_generation", {"mode": mode, "clear_cache": clear_cache,
                                                "stage_ids": stage_ids}))
        self.paused = True

    async def resume_generation(self, stage_ids: list[int] | None = None) -> None:
        self.calls.append(("resume_generation", {"stage_ids": stage_ids}))
        self.paused = False

    async def is_paused(self) -> bool:
        return self.paused

    async def sleep(self, stage_ids: list[int] | None = None, level: int = 2, mode: str = "abort") -> list[Any]:
        self.calls.append(("sleep", {"stage_ids": stage_ids, "level": level, "mode": mode}))
        self.paused, self.sleeping = True, {"weights", "kv_cache"}
        return []

    async def wake_up(self, stage_ids: list[int] | None = None, tags: list[str] | None = None) -> list[Any]:
        self.calls.append(("wake_up", {"stage_ids": stage_ids, "tags": tags}))
        self.sleeping -= set(self.sleeping if tags is None else tags)
        return []

    async def is_sleeping(self) -> bool:
        return bool(self.sleeping)

    async def reset_mm_cache(self) -> None:
        self.calls.append(("reset_mm_cache", {}))

    async def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        self.calls.append(("reset_prefix_cache (a no-op in AsyncOmni 0.28)", {}))
        return True

    async def reset_encoder_cache(self) -> None:
        self.calls.append(("reset_encoder_cache (a no-op in AsyncOmni 0.28)", {}))

    async def start_profile(self, profile_prefix: str | None = None, stages: list[int] | None = None) -> list[Any]:
        self.calls.append(("start_profile", {"profile_prefix": profile_prefix, "stages": stages}))
        return []

    async def stop_profile(self, stages: list[int] | None = None) -> list[Any]:
        self.calls.append(("stop_profile", {"stages": stages}))
        return []

    def shutdown(self, timeout: float | None = None) -> None:
        self.calls.append(("shutdown", {}))
