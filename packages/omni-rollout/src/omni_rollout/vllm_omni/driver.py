"""The one driver of ``vllm_omni.AsyncOmni``: what verl's vLLM server runs as its engine.

:class:`VllmOmniDriver` wraps a running ``AsyncOmni`` with the rollout adapter's view of the
pipeline (which stage is the policy, which stages take weights) and presents the surface of
vLLM's ``AsyncLLM`` that verl's ``vLLMHttpServer`` calls on ``self.engine``, so verl's own
``generate``, ``abort_all_requests``, ``sleep``, ``wake_up`` and ``clear_kv_cache`` run
unchanged on a vLLM-Omni pipeline:

- ``generate(prompt, sampling_params, request_id, lora_request, priority)``: the policy stage
  gets the caller's ``SamplingParams`` (reporting once, ``FINAL_ONLY``), the other stages keep
  their deploy defaults; the engine prompt is built by the adapter with the processor's pad
  dedup; the policy stage's ``RequestOutput`` s are yielded (with requested prompt log-probs
  checked against the ids sent, :mod:`prompt_logprobs`); with ``keep_stage_outputs`` every
  stage's last output is kept for :meth:`~VllmOmniDriver.take_stage_outputs`.
- ``collective_rpc`` goes to the weight-sync stages and raises when a stage reports a failure;
  ``list_loras`` asks the policy stage.
- ``reset_prefix_cache`` / ``reset_encoder_cache`` really clear (``AsyncOmni``'s own are no-ops,
  see :mod:`compat`); ``output_processor.request_states`` and ``wait_for_requests_to_drain``
  read ``AsyncOmni``'s in-flight table; ``wake_up`` resumes scheduling once every stage is
  awake, as vLLM's engine core does; ``sleep(level=2)`` is refused (no wake from it).

vLLM and vLLM-Omni are imported only inside the functions that need them (gpu extra).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omni_contracts import RolloutAdapter

from omni_rollout.vllm_omni import compat
from omni_rollout.vllm_omni.prompt_logprobs import check_prompt_logprobs
from omni_rollout.vllm_omni.prompts import DedupPadTokens, build_engine_prompt

PROMPT_KEYS = frozenset({"prompt_token_ids", "multi_modal_data", "mm_processor_kwargs"})
DRAIN_TIMEOUT_S = 300.0
DRAIN_POLL_S = 0.1
ENGINE_ERROR_ATTEMPTS = 2
"""Sends of one request before an engine error is raised (the first retry recovers a cache drift)."""
logger = logging.getLogger(__name__)


def engine_error(output: Any) -> bool:
    """Whether a finished output is vLLM's retryable request error (``finish_reason='error'``):
    no tokens were generated, so it is never a sample."""
    return any(getattr(completion, "finish_reason", None) == "error" for completion in getattr(output, "outputs", ()))


class StageRpcError(RuntimeError):
    """A stage RPC failed on some stage, or no stage answered."""


class UnsupportedByVllmOmniError(NotImplementedError):
    """A call vLLM's ``AsyncLLM`` takes that vLLM-Omni 0.28 cannot carry out."""


class EngineOutputError(RuntimeError):
    """vLLM-Omni reported an error for a request (an output with ``error`` set)."""


def start_async_omni(model_path: str, deploy_config: str, **omni_kwargs: Any) -> Any:
    """``AsyncOmni`` on a deploy config; call it on the event loop that will drive it."""
    from vllm_omni.entrypoints.async_omni import AsyncOmni

    return AsyncOmni(model=model_path, deploy_config=deploy_config, **omni_kwargs)


def final_only(params: Any) -> Any:
    """A copy of sampling params that reports once, when the request finishes."""
    if not hasattr(params, "output_kind"):
        return params
    from vllm.sampling_params import RequestOutputKind

    params = params.clone() if callable(getattr(params, "clone", None)) else copy.deepcopy(params)
    params.output_kind = RequestOutputKind.FINAL_ONLY
    return params


@dataclass(frozen=True)
class RequestStatesView:
    """What verl reads as ``engine.output_processor``: the in-flight requests."""

    omni: Any

    @property
    def request_states(self) -> Mapping[str, Any]:
        return compat.request_states(self.omni)


class VllmOmniDriver:
    """A running ``AsyncOmni`` presented as vLLM's ``AsyncLLM``, for one rollout adapter mode."""

    def __init__(
        self,
        omni: Any,
        adapter: RolloutAdapter,
        mode: str,
        *,
        dedup_pad_tokens: DedupPadTokens | None = None,
        keep_stage_outputs: bool = False,
        prompt_information: Mapping[str, Any] | None = None,
    ) -> None:
        self.omni = omni
        self.adapter = adapter
        self.mode = mode
        self.dedup_pad_tokens = dedup_pad_tokens
        self.prompt_information = dict(prompt_information or {})
        """``additional_information`` of every request (the adapter's ``engine_prompt_information``)."""
        self.keep_stage_outputs = keep_stage_outputs
        self._stage_outputs: dict[str, dict[int, Any]] = {}
        self.policy_stage = adapter.policy_stage_id(mode)
        self.sync_stage_ids = tuple(adapter.weight_sync_stage_ids(mode))
        if not self.sync_stage_ids:
            raise ValueError(f"{type(adapter).__name__}.weight_sync_stage_ids({mode!r}) names no stage.")
        self.output_processor = RequestStatesView(omni)
        self.engine_retries = 0
        """Requests sent again after a retryable engine error (see :meth:`generate`)."""

    # ---- requests ----------------------------------------------------------------------

    def build_prompt(
        self,
        prompt_ids: Sequence[int],
        multi_modal_data: Mapping[str, Any] | None = None,
        mm_processor_kwargs: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The engine prompt: the adapter's, from pad-deduplicated ids (see ``prompts``)."""
        return build_engine_prompt(
            self.adapter, prompt_ids, multi_modal_data or None, mm_processor_kwargs,
            dedup_pad_tokens=self.dedup_pad_tokens, information=self.prompt_information,
        )

    def stage_params(self, policy_params: Any) -> list[Any]:
        """One params object per stage: ``policy_params`` at the policy stage, the deploy
        defaults elsewhere; all copies reporting once (``FINAL_ONLY``)."""
        params = [final_only(p) for p in self.omni.default_sampling_params_list]
        if not 0 <= self.policy_stage < len(params):
            raise ValueError(f"Policy stage {self.policy_stage} is not among the engine's {len(params)} stages.")
        params[self.policy_stage] = final_only(policy_params)
        return params

    async def stream(
        self,
        prompt: dict[str, Any],
        params: list[Any],
        request_id: str,
        *,
        lora_request: Any = None,
        priority: int = 0,
    ) -> AsyncIterator[Any]:
        """Every output ``AsyncOmni`` yields for one request (all final stages).

        Raises:
            UnsupportedByVllmOmniError: a LoRA for a policy stage other than 0.
            EngineOutputError: vLLM-Omni reported an error for the request.
        """
        if lora_request is not None and self.policy_stage != compat.LORA_STAGE_ID:
            raise UnsupportedByVllmOmniError(
                f"vLLM-Omni 0.28 applies a request's LoRA to stage {compat.LORA_STAGE_ID} only; the "
                f"policy stage of mode {self.mode!r} is {self.policy_stage}. Sync merged weights instead."
            )
        async for output in self.omni.generate(
            prompt, request_id=request_id, sampling_params_list=params,
            lora_request=lora_request, priority=priority,
        ):
            error = getattr(output, "error", None)
            if error:
                raise EngineOutputError(f"vLLM-Omni failed request {request_id!r}: {error}")
            yield output

    async def generate(
        self,
        prompt: Mapping[str, Any],
        sampling_params: Any,
        request_id: str,
        *,
        lora_request: Any = None,
        priority: int = 0,
    ) -> AsyncIterator[Any]:
        """``AsyncLLM.generate`` for a token prompt: the policy stage's ``RequestOutput`` s.

        An output that finished with vLLM's retryable error (``finish_reason='error'``, no
        tokens) is never yielded: the request is sent again once with the frontend's
        multimodal cache cleared (the drift that error reports), and raises if it fails again.

        Args:
            prompt: a ``TokensPrompt``-like dict (``prompt_token_ids``, optional
                ``multi_modal_data``, ``mm_processor_kwargs``).
            sampling_params: vLLM ``SamplingParams`` of the policy stage.

        Raises:
            ValueError: the prompt has a key the driver would drop.
            PromptLogprobsError: prompt log-probs were asked for and do not belong to exactly
                the ids sent.
            EngineOutputError: the engine reported an error, or the retryable error twice.
        """
        unknown = sorted(set(prompt) - PROMPT_KEYS)
        if unknown:
            raise ValueError(f"The vLLM-Omni driver takes token prompts only ({sorted(PROMPT_KEYS)}); got {unknown}.")
        prompt_ids = [int(token) for token in prompt["prompt_token_ids"]]
        engine_prompt = self.build_prompt(
            prompt_ids, prompt.get("multi_modal_data"), prompt.get("mm_processor_kwargs")
        )
        num_prompt_logprobs = getattr(sampling_params, "prompt_logprobs", None)
        for attempt in range(ENGINE_ERROR_ATTEMPTS):
            outputs = []
            async for output in self.stream(
                engine_prompt, self.stage_params(sampling_params), request_id,
                lora_request=lora_request, priority=priority,
            ):
                stage_id = getattr(output, "stage_id", None)
                if self.keep_stage_outputs:
                    kept = self._stage_outputs.setdefault(request_id, {})
                    kept[self.policy_stage if stage_id is None else int(stage_id)] = output
                if stage_id is None or int(stage_id) == self.policy_stage:
                    outputs.append(output)
            if not any(engine_error(output) for output in outputs):
                break
            if attempt + 1 == ENGINE_ERROR_ATTEMPTS:
                raise EngineOutputError(
                    f"vLLM-Omni ended request {request_id!r} with finish_reason='error' and no tokens "
                    f"{ENGINE_ERROR_ATTEMPTS} times (a retryable engine error, such as a multimodal cache "
                    "miss, that did not recover); it is not a sample."
                )
            # The one retryable error a driver can cause is a frontend/stage multimodal cache
            # drift: resend with the media's data (vLLM's own frontend drops the hashes).
            self.engine_retries += 1
            logger.warning("vLLM-Omni returned a retryable error for request %r; clearing the frontend "
                           "multimodal cache and sending it again (retry %d)", request_id, self.engine_retries)
            compat.clear_frontend_mm_cache(self.omni)
        for output in outputs:
            if num_prompt_logprobs is not None and getattr(output, "finished", True) and output.outputs:
                check_prompt_logprobs(output, prompt_ids, int(num_prompt_logprobs))
            yield output

    def take_stage_outputs(self, request_id: str) -> list[Any]:
        """The last output of every stage of a finished ``generate`` request, in stage order,
        forgotten once taken (kept only with ``keep_stage_outputs``: a speech policy's
        sample needs the stages before it, which ``generate`` does not yield)."""
        kept = self._stage_outputs.pop(request_id, {})
        return [kept[stage_id] for stage_id in sorted(kept)]

    def in_flight_request_ids(self) -> set[str]:
        """The caller-given ids of the requests ``AsyncOmni`` is running."""
        return {compat.external_request_id(state) for state in compat.request_states(self.omni).values()}

    async def abort(self, request_id: str | Sequence[str]) -> None:
        """Abort requests by the ids the caller gave ``generate``; each ends with an abort output."""
        await self.omni.abort(request_id)

    async def wait_for_requests_to_drain(self, drain_timeout: float = DRAIN_TIMEOUT_S) -> None:
        """Wait until ``AsyncOmni`` tracks no request (``AsyncOmni`` has no such method)."""
        states = compat.request_states(self.omni)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_timeout
        while states:
            if loop.time() > deadline:
                raise TimeoutError(f"{len(states)} vLLM-Omni request(s) still running after {drain_timeout} s.")
            await asyncio.sleep(DRAIN_POLL_S)

    # ---- stage RPC -------------------------------------------------------------------------

    async def collective_rpc(
        self,
        method: Any,
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        stage_ids: Sequence[int] | None = None,
    ) -> list[Any]:
        """A worker RPC on ``stage_ids`` (default: the weight-sync stages).

        Raises:
            StageRpcError: a stage answered ``{"supported": False, "error": ...}`` (vLLM-Omni's
                stage pool does not raise), or no stage answered.
        """
        stages = list(self.sync_stage_ids if stage_ids is None else stage_ids)
        results = list(
            await self.omni.collective_rpc(method=method, timeout=timeout, args=args, kwargs=kwargs, stage_ids=stages)
        )
        failures = compat.rpc_failures(results)
        if failures or not results:
            name = getattr(method, "__name__", method)
            raise StageRpcError(f"collective_rpc({name!r}) on stages {stages} failed: {failures or 'no stage answered'}")
        return results

    async def list_loras(self) -> set[int]:
        """The adapter ids the policy stage holds."""
        ids: set[int] = set()
        pending: list[Any] = await self.collective_rpc("list_loras", stage_ids=[self.policy_stage])
        while pending:
            item = pending.pop()
            if isinstance(item, (list, tuple, set, frozenset)):
                pending.extend(item)
            elif isinstance(item, int):
                ids.add(item)
        return ids

    async def start_profile(self, profile_prefix: str | None = None) -> None:
        self._raise_on_failures("start_profile", await self.omni.start_profile(profile_prefix=profile_prefix))

    async def stop_profile(self) -> None:
        self._raise_on_failures("stop_profile", await self.omni.stop_profile())

    @staticmethod
    def _raise_on_failures(name: str, results: Sequence[Any] | None) -> None:
        failures = compat.rpc_failures(list(results or []))
        if failures:
            raise StageRpcError(f"{name} failed: {failures}")

    # ---- pause, sleep, caches --------------------------------------------------------------

    async def pause_generation(
        self,
        *,
        mode: str = "abort",
        wait_for_inflight_requests: bool | None = None,
        clear_cache: bool = True,
        stage_ids: Sequence[int] | None = None,
    ) -> None:
        """Close admission and pause the stages' schedulers (``clear_cache``: and clear their
        caches). ``wait_for_inflight_requests`` is vLLM's deprecated spelling of ``mode="wait"``."""
        await self.omni.pause_generation(
            mode="wait" if wait_for_inflight_requests else mode,
            clear_cache=clear_cache, stage_ids=None if stage_ids is None else list(stage_ids),
        )

    async def resume_generation(self, stage_ids: Sequence[int] | None = None) -> None:
        await self.omni.resume_generation(stage_ids=None if stage_ids is None else list(stage_ids))

    async def is_paused(self) -> bool:
        return bool(await self.omni.is_paused())

    async def sleep(self, level: int = 1, mode: str = "abort", stage_ids: Sequence[int] | None = None) -> None:
        """Sleep the stages (level 1: weights to CPU, KV cache dropped, caches cleared).

        Raises:
            UnsupportedByVllmOmniError: ``level`` above 1 (vLLM-Omni 0.28 cannot wake from it).
        """
        if level > compat.MAX_SLEEP_LEVEL:
            raise UnsupportedByVllmOmniError(
                f"sleep(level={level}): vLLM-Omni 0.28's AsyncOmni.wake_up raises NotImplementedError "
                f"after level 2 (the weights are discarded); use level {compat.MAX_SLEEP_LEVEL}."
            )
        await self.omni.sleep(stage_ids=None if stage_ids is None else list(stage_ids), level=level, mode=mode)
        compat.clear_frontend_mm_cache(self.omni)  # a sleeping stage dropped its multimodal cache

    async def wake_up(self, tags: list[str] | None = None, stage_ids: Sequence[int] | None = None) -> None:
        """Wake the stages; once nothing sleeps, resume scheduling (vLLM's engine core does so
        itself; ``AsyncOmni`` keeps its admission gate closed after an AR sleep)."""
        await self.omni.wake_up(stage_ids=None if stage_ids is None else list(stage_ids), tags=tags)
        if not await self.omni.is_sleeping():
            await self.omni.resume_generation()

    async def is_sleeping(self) -> bool:
        return bool(await self.omni.is_sleeping())

    async def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        """Clear the prefix cache of the policy and weight-sync stages (and their mm/encoder caches).

        Runs ``pause_generation(mode="abort", clear_cache=True)`` on those stages, then restores
        the previous admission state: paused stays paused, running resumes. Both flags are
        implied (the engine core resets running requests and the connector with the cache).

        Raises:
            RuntimeError: requests are in flight on a running engine (clearing would abort them).
        """
        await self._clear_stage_caches("reset_prefix_cache")
        return True

    async def reset_encoder_cache(self) -> None:
        """Clear the encoder cache (``AsyncOmni``'s own is a no-op); see :meth:`reset_prefix_cache`."""
        await self._clear_stage_caches("reset_encoder_cache")

    async def reset_mm_cache(self) -> None:
        """Clear the frontend multimodal cache (the stages' clear with the prefix cache).

        ``AsyncOmni.reset_mm_cache`` clears nothing on vLLM 0.28 (:mod:`compat`); the driver
        clears the frontend's cache itself."""
        compat.clear_frontend_mm_cache(self.omni)

    async def _clear_stage_caches(self, name: str) -> None:
        stages = sorted({self.policy_stage, *self.sync_stage_ids})
        paused = await self.omni.is_paused()
        in_flight = len(compat.request_states(self.omni))
        if not paused and in_flight:
            raise RuntimeError(
                f"{name}: {in_flight} request(s) in flight on a running engine. vLLM-Omni 0.28 clears "
                "a stage's caches only through pause_generation(clear_cache=True), which would abort "
                "them; pause_generation or drain first."
            )
        await self.omni.pause_generation(mode="abort", clear_cache=True, stage_ids=stages)
        # The stages dropped their (P1) multimodal caches: the frontend's (P0) must follow, or
        # its next request for a media item it has seen carries the hash alone.
        compat.clear_frontend_mm_cache(self.omni)
        if not paused:
            await self.omni.resume_generation(stage_ids=stages)

    def shutdown(self) -> None:
        self.omni.shutdown()
