"""vLLM-Omni as a verl rollout backend (``actor_rollout_ref.rollout.name=vllm_omni``).

Built on verl's vLLM server by its subclass hooks, so verl keeps owning the replica
layout, sleep/wake, weight transfer and request admission; what differs is the engine:

- ``run_server`` starts ``vllm_omni.AsyncOmni`` on a deploy config generated from the
  rollout adapter's pipeline (``omni_rollout.vllm_omni.build_deploy_config``) instead of
  vLLM's ``AsyncLLM`` + OpenAI app. verl's colocate worker extension is installed on the
  policy stage, so verl's IPC weight sync lands there. Requests arrive through the Ray
  handle (token in, token out); no HTTP app is served.
- ``generate`` builds the engine prompt with the adapter (``build_engine_prompt``: pad
  dedup, custom prompts) and reads the policy stage's output back with
  ``convert_request``.
- as a distillation teacher (verl starts the same replica class with ``is_teacher_model``),
  ``generate`` gets prompt + response with ``max_tokens=1`` and ``prompt_logprobs`` and
  returns the teacher's log-probs in ``extra_fields`` (``prompt_logprobs.teacher_fields``).
- ``collective_rpc`` (weight sync and verl's worker calls) goes to the adapter's
  weight-sync stages only, and raises when a stage reports a failure (vLLM-Omni's stage
  pool returns ``{"supported": False, "error": ...}`` instead of raising); ``wake_up``
  reopens AsyncOmni's admission gate, which its ``wake_up`` leaves closed after a sleep,
  once every stage is fully awake.
- what verl's server asks of vLLM's ``AsyncLLM`` and ``AsyncOmni`` lacks or refuses:
  ``wait_for_requests_to_drain`` (called by ``vLLMReplica.sleep`` every step) waits for
  AsyncOmni's in-flight requests; sleeps are level 1 (``AsyncOmni.wake_up`` raises
  ``NotImplementedError`` after level 2); the max-length check reads the text config of a
  composite HF config (Qwen3-Omni has no top-level ``max_position_embeddings``).

The worker-side half is verl's own ``ServerAdapter``: it finds this server by the actor
name prefix ``vllm_omni_`` (from ``rollout.name``) and sends weights over verl's IPC.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import ray
from verl.utils.net_utils import get_free_port
from verl.workers.rollout.replica import RolloutMode, TokenOutput
from verl.workers.rollout.utils import get_vision_placeholder_token_ids
from verl.workers.rollout.vllm_rollout.utils import (
    VLLM_LORA_INT_ID,
    VLLM_LORA_NAME,
    VLLM_LORA_PATH,
    get_vllm_max_lora_rank,
)
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica

from omni_rollout.vllm_omni import (
    DeployOptions,
    ReplicaLayout,
    build_deploy_config,
    build_engine_prompt,
    convert_request,
    dedup_function,
    write_deploy_config,
)
from omni_trainer.verl_engine.adapters import rollout_adapter
from omni_trainer.verl_engine.agent_loop import adapter_processor
from omni_trainer.verl_engine.prompt_logprobs import TeacherOutputError, teacher_fields
from omni_trainer.verl_engine.settings import ROLLOUT_NAME, VerlSettings

WORKER_EXTENSION = "verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension"
STOP_REASONS = {"abort": "aborted", "stop": "completed", "length": "completed"}
DRAIN_TIMEOUT_S = 300.0


def deploy_options(rollout: Any, *, lora_rank: int, seed: int) -> DeployOptions:
    """verl's rollout config (``RolloutConfig``-shaped) -> the policy stage's deploy options."""
    sizes = rollout.cudagraph_capture_sizes
    return DeployOptions(
        gpu_memory_utilization=rollout.gpu_memory_utilization,
        max_num_seqs=rollout.max_num_seqs,
        max_model_len=rollout.max_model_len,
        cudagraph_capture_sizes=tuple(sizes) if sizes else None,
        enforce_eager=rollout.enforce_eager,
        enable_sleep_mode=rollout.free_cache_engine,
        enable_prefix_caching=rollout.enable_prefix_caching,
        dtype=rollout.dtype,
        enable_lora=lora_rank > 0,
        # vLLM takes only its MaxLoRARanks (1, 8, 16, 32, ...); verl rounds up the same way.
        max_lora_rank=get_vllm_max_lora_rank(lora_rank) if lora_rank > 0 else None,
        logprobs_mode=rollout.logprobs_mode,
        extra_policy_args={
            "worker_extension_cls": WORKER_EXTENSION,
            "load_format": rollout.load_format,
            "seed": seed,
            "max_num_batched_tokens": rollout.max_num_batched_tokens,
            "enable_chunked_prefill": rollout.enable_chunked_prefill,
        },
    )


class VllmOmniHttpServer(vLLMHttpServer):
    """verl's vLLM server with vLLM-Omni's ``AsyncOmni`` as the engine."""

    def _post_init(self, cuda_visible_devices: str) -> None:
        super()._post_init(cuda_visible_devices)
        self.settings = VerlSettings.from_env()
        self.rollout_adapter = rollout_adapter(self.settings)
        self.mode = self.settings.pipeline_mode
        self.policy_stage = self.rollout_adapter.policy_stage_id(self.mode)
        self.sync_stages = list(self.rollout_adapter.weight_sync_stage_ids(self.mode))
        self.dedup = dedup_function(adapter_processor(self.settings))

    def _validate_configs(self) -> None:
        # verl looks for max_position_embeddings on hf_config and hf_config.text_config only;
        # a composite config (Qwen3-Omni) keeps it under thinker_config.text_config.
        hf_config = self.model_config.hf_config
        composite = (
            getattr(hf_config, "max_position_embeddings", None) is None
            and getattr(hf_config, "text_config", None) is None
            and callable(getattr(hf_config, "get_text_config", None))
        )
        if not composite:
            super()._validate_configs()
            return
        self.model_config.hf_config = hf_config.get_text_config()
        try:
            super()._validate_configs()
        finally:
            self.model_config.hf_config = hf_config

    def _resolve_sleep_level(self) -> int:
        # AsyncOmni.wake_up raises NotImplementedError after sleep(level=2).
        return 1

    def _get_engine_kwargs_key(self) -> str:
        return ROLLOUT_NAME

    def _preprocess_engine_kwargs(self, engine_kwargs: dict[str, Any]) -> None:
        # Our pipeline keys are not vLLM CLI arguments (they came through the settings).
        engine_kwargs.pop("pipeline_name", None)
        engine_kwargs.pop("pipeline_mode", None)
        super()._preprocess_engine_kwargs(engine_kwargs)

    async def run_server(self, args: argparse.Namespace) -> None:
        from vllm_omni.entrypoints.async_omni import AsyncOmni

        tp = self.config.tensor_model_parallel_size
        layout = ReplicaLayout(gpus_per_replica=tp, tensor_parallel_size=tp)
        options = deploy_options(self.config, lora_rank=_lora_rank(self.model_config), seed=self.replica_rank + self.config.seed)
        deploy = build_deploy_config(self.rollout_adapter, self.mode, layout, options)
        work_dir = Path(tempfile.mkdtemp(prefix=f"omni_rl_deploy_{self.replica_rank}_"))
        path = write_deploy_config(deploy, work_dir / "deploy.yaml")
        self.engine = AsyncOmni(model=self.model_config.local_path, deploy_config=str(path))
        await self.engine.reset_mm_cache()
        # As verl's vLLM server does: mask the out-of-vocabulary tail and the vision
        # placeholders (a sampled <|image_pad|> has no image behind it) on the policy stage.
        await self._stage_rpc(
            "monkey_patch_model",
            kwargs={
                "vocab_size": len(self.model_config.tokenizer),
                "banned_token_ids": get_vision_placeholder_token_ids(self.model_config.processor),
            },
            stage_ids=[self.policy_stage],
        )
        # No HTTP app: verl's agent loop reaches this server through its Ray handle. verl keys
        # its load balancer by "ip:port", so each replica needs a port of its own (a constant
        # would merge the replicas of a node into one): a free one, held open as a reservation.
        port, self._port_reservation = get_free_port(self._server_address, with_alive_sock=True)
        self._server_port = port  # type: ignore[assignment]

    async def _stage_rpc(
        self,
        method: Any,
        *,
        stage_ids: list[int],
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]:
        engine: Any = self.engine  # AsyncOmni (verl types it as vLLM's AsyncLLM)
        results = list(
            await engine.collective_rpc(method=method, timeout=timeout, args=args, kwargs=kwargs, stage_ids=stage_ids)
        )
        failures = [r for r in results if isinstance(r, dict) and (r.get("error") or r.get("supported") is False)]
        if failures or not results:
            name = getattr(method, "__name__", method)
            raise RuntimeError(f"collective_rpc({name!r}) on stages {stage_ids} failed: {failures or 'no stage answered'}")
        return results

    async def collective_rpc(
        self, method: Any, timeout: float | None = None, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> None:
        await self._stage_rpc(method, timeout=timeout, args=args, kwargs=kwargs, stage_ids=self.sync_stages)

    async def wait_for_requests_to_drain(self, drain_timeout: float = DRAIN_TIMEOUT_S) -> None:
        """Wait until AsyncOmni tracks no request (it has no ``wait_for_requests_to_drain``)."""
        engine: Any = self.engine
        deadline = time.monotonic() + drain_timeout
        while engine.request_states:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(engine.request_states)} vLLM-Omni request(s) still running after {drain_timeout} s."
                )
            await asyncio.sleep(0.1)

    async def wake_up(self, tags: list[str] | None = None) -> None:
        await super().wake_up(tags)
        # Only once nothing sleeps: resuming after a partial (weights-only) wake would let the
        # scheduler run while the KV cache is still unmapped.
        if self.node_rank == 0 and self.rollout_mode != RolloutMode.STANDALONE and not await self.engine.is_sleeping():
            await self.engine.resume_generation()

    async def generate(  # type: ignore[override]
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: list[Any] | None = None,
        video_data: list[Any] | None = None,
        audio_data: list[Any] | None = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        priority: int = 0,
        **_: Any,
    ) -> TokenOutput:
        from vllm import SamplingParams
        from vllm.lora.request import LoRARequest
        from vllm.sampling_params import RequestOutputKind

        params = dict(sampling_params)
        budget = self.config.max_model_len - len(prompt_ids)
        if budget < 1:
            raise ValueError(f"Prompt of {len(prompt_ids)} tokens leaves no room under max_model_len={self.config.max_model_len}.")
        wanted = params.pop("max_tokens", None) or params.pop("max_new_tokens", None) or self.config.response_length
        logprobs = 0 if params.pop("logprobs", False) else None
        num_prompt_logprobs = params.get("prompt_logprobs")  # set by verl's distillation teacher
        media = {"image": image_data, "video": video_data, "audio": audio_data}
        prompt = build_engine_prompt(
            self.rollout_adapter, prompt_ids, {k: v for k, v in media.items() if v is not None} or None,
            mm_processor_kwargs or None, dedup_pad_tokens=self.dedup,
        )
        engine: Any = self.engine  # AsyncOmni (verl types it as vLLM's AsyncLLM)
        stage_params = list(engine.default_sampling_params_list)
        stage_params[self.policy_stage] = SamplingParams(
            max_tokens=max(1, min(int(wanted), budget)), logprobs=logprobs,
            output_kind=RequestOutputKind.FINAL_ONLY, **params,
        )
        lora_request = None
        if self.lora_as_adapter and VLLM_LORA_INT_ID in await self.engine.list_loras():
            lora_request = LoRARequest(lora_name=VLLM_LORA_NAME, lora_int_id=VLLM_LORA_INT_ID, lora_path=VLLM_LORA_PATH)

        rejected = await self._park_until_admitted(request_id)
        if rejected is not None:
            return rejected
        outputs: list[Any] = []
        try:
            async for output in engine.generate(
                prompt=prompt, request_id=request_id, sampling_params_list=stage_params,
                lora_request=lora_request, priority=priority,
            ):
                if not outputs:
                    self._admitting -= 1
                outputs.append(output)
        finally:
            if not outputs:
                self._admitting -= 1
        # One output per stage (its last): stages left at their default output kind report
        # every step, and convert_request expects each stage once.
        last = {getattr(output, "stage_id", None): output for output in outputs}
        converted = convert_request(self.rollout_adapter, self.mode, prompt_ids, list(last.values()))
        sample = converted.sample
        extra_fields: dict[str, Any] = {"global_steps": self.global_steps}
        if num_prompt_logprobs is not None:
            extra_fields.update(self._teacher_fields(outputs, prompt_ids, int(num_prompt_logprobs)))
        return TokenOutput(
            token_ids=list(sample.response_ids),
            log_probs=list(sample.response_logprobs) if sample.response_logprobs is not None else None,
            routed_experts=None,
            stop_reason=STOP_REASONS.get(converted.finish_reason, converted.finish_reason),
            extra_fields=extra_fields,
        )

    def _teacher_fields(self, outputs: list[Any], prompt_ids: list[int], num_logprobs: int) -> dict[str, Any]:
        """verl's ``prompt_ids``/``prompt_logprobs`` from the policy stage's last output."""
        policy = [o for o in outputs if getattr(o, "stage_id", None) in (None, self.policy_stage)]
        if not policy:
            raise TeacherOutputError(
                f"The teacher engine returned no output of the policy stage {self.policy_stage} "
                f"(stages seen: {[getattr(o, 'stage_id', None) for o in outputs]})."
            )
        final = policy[-1]
        return teacher_fields(
            getattr(final, "prompt_token_ids", None), getattr(final, "prompt_logprobs", None),
            num_logprobs=num_logprobs, sequence_ids=prompt_ids,
        )


class VllmOmniReplica(vLLMReplica):
    """One vLLM-Omni rollout replica; verl places and drives it like a vLLM replica."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(VllmOmniHttpServer)

    def _get_server_name_prefix(self) -> str:
        return f"{ROLLOUT_NAME}_"


def _lora_rank(model_config: Any) -> int:
    """The adapter rank the engine serves; 0 when merged into the synced weights (as verl)."""
    if model_config.lora.get("merge", False):
        return 0
    rank = int(model_config.lora.get("rank", 0) or 0)
    return rank if rank > 0 else int(model_config.lora_rank or 0)
