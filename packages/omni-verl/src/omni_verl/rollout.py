"""vLLM-Omni as a verl rollout backend (``actor_rollout_ref.rollout.name=vllm_omni``).

Built on verl's vLLM server by its subclass hooks, so verl keeps owning the replica
layout, sleep/wake, weight transfer, request admission and ``generate``; what differs is the
engine: ``run_server`` starts ``vllm_omni.AsyncOmni`` on a deploy config generated from the
rollout adapter's pipeline (``omni_rollout.vllm_omni.build_deploy_config``) and sets
``self.engine`` to the one vLLM-Omni driver (``omni_rollout.vllm_omni.VllmOmniDriver``),
which presents the ``AsyncLLM`` surface verl's server calls. So verl's own code runs:

- ``generate`` (verl's defaults included: ``repetition_penalty``, ``ignore_eos``, the
  full-determinism seed, prompt log-probs for a distillation teacher, ``num_preempted``); the
  driver builds the engine prompt with the adapter (pad dedup), gives the policy stage
  verl's ``SamplingParams``, yields the policy stage's output and checks that prompt
  log-probs belong to exactly the ids verl sent; for a speech policy (a talker) the
  override adds the sample built from every stage's output (:mod:`omni_rollout.speech_sample`);
- ``collective_rpc`` (weight sync) reaches the adapter's weight-sync stages only and raises
  when a stage reports a failure; verl's colocate worker extension is installed on the
  policy stage, so verl's IPC weight sync lands there;
- ``abort_all_requests`` (reads the driver's ``output_processor.request_states``),
  ``wait_for_requests_to_drain``, ``wake_up`` (the driver resumes scheduling once every stage
  is awake, as vLLM's engine core does), ``clear_kv_cache`` (the driver's
  ``reset_prefix_cache`` really clears: ``AsyncOmni``'s is a no-op).

Overridden here: the max-length check reads the text config of a composite HF config
(Qwen3-Omni has no top-level ``max_position_embeddings``); sleeps are level 1
(``AsyncOmni.wake_up`` raises after level 2); ``abort_request`` goes through the driver
(verl's reaches into vLLM's output processor). Requests arrive through the Ray handle
(token in, token out); no HTTP app is served.

The worker-side half is verl's own ``ServerAdapter``: it finds this server by the actor
name prefix ``vllm_omni_`` (from ``rollout.name``) and sends weights over verl's IPC.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import ray
from verl.workers.rollout.replica import TokenOutput
from verl.workers.rollout.vllm_rollout.utils import get_vllm_max_lora_rank
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica

from omni_contracts import LogitMask
from omni_rollout.vllm_omni import (
    DeployOptions,
    ReplicaLayout,
    VllmOmniDriver,
    build_deploy_config,
    dedup_function,
    start_async_omni,
    write_deploy_config,
)
from omni_rollout.placeholders import policy_logit_mask
from omni_verl.adapters import rollout_adapter, training_adapter
from omni_verl.compat import reserve_server_port
from omni_verl.processor import adapter_processor
from omni_verl.settings import CPU_PLATFORM_ENV, ROLLOUT_NAME, VerlSettings
from omni_verl_cpu import PLATFORM as CPU_PLATFORM
from omni_rollout.speech_sample import SPEECH_SAMPLE, speech_sample

WORKER_EXTENSION = "verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension"
logger = logging.getLogger(__name__)


def deploy_options(rollout: Any, *, lora_rank: int, seed: int) -> DeployOptions:
    """verl's rollout config (``RolloutConfig``-shaped) -> the replica's deploy options: the policy
    stage's knobs, and the memory share (split over the stages on a GPU), sleep mode
    (``free_cache_engine``) and prefix caching of every stage; on verl's CPU platform, every
    stage eager (vLLM's CPU build would compile each with inductor at start-up)."""
    sizes = rollout.cudagraph_capture_sizes
    return DeployOptions(
        gpu_memory_utilization=rollout.gpu_memory_utilization,
        max_num_seqs=rollout.max_num_seqs,
        max_model_len=rollout.max_model_len,
        cudagraph_capture_sizes=tuple(sizes) if sizes else None,
        enforce_eager=rollout.enforce_eager,
        all_stages_eager=os.environ.get(CPU_PLATFORM_ENV) == CPU_PLATFORM,
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
    """verl's vLLM server with vLLM-Omni's ``AsyncOmni`` (through the driver) as the engine."""

    def _post_init(self, cuda_visible_devices: str) -> None:
        super()._post_init(cuda_visible_devices)
        self.settings = VerlSettings.from_env()
        self.rollout_adapter = rollout_adapter(self.settings)
        self.mode = self.settings.pipeline_mode
        self.processor = adapter_processor(self.settings)
        self.field_specs = training_adapter(self.model_config.hf_config, self.settings).extra_field_specs

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       *args: Any, **kwargs: Any) -> TokenOutput:
        """verl's ``generate``; for a policy whose training reads model-native fields (a
        talker), its :data:`SPEECH_SAMPLE` is added, built from every stage's output."""
        driver: VllmOmniDriver = self.engine  # type: ignore[assignment]
        try:
            result = await super().generate(prompt_ids, sampling_params, request_id, *args, **kwargs)
            if self.field_specs:
                sample = speech_sample(self.rollout_adapter, self.mode, prompt_ids,
                                       driver.take_stage_outputs(request_id), self.field_specs, result.token_ids)
                if sample is not None:
                    result.extra_fields[SPEECH_SAMPLE] = sample
            return result
        finally:
            driver.take_stage_outputs(request_id)  # never left behind by an error

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
        # Our pipeline keys are not vLLM CLI arguments (they came through the settings), nor is
        # verl-omni's output_mode (the loader accepts only "ar", what this server does).
        for key in ("pipeline_name", "pipeline_mode", "output_mode"):
            engine_kwargs.pop(key, None)
        super()._preprocess_engine_kwargs(engine_kwargs)

    async def run_server(self, args: argparse.Namespace) -> None:
        tp = self.config.tensor_model_parallel_size
        layout = ReplicaLayout(gpus_per_replica=tp, tensor_parallel_size=tp)
        options = deploy_options(self.config, lora_rank=_lora_rank(self.model_config), seed=self.replica_rank + self.config.seed)
        deploy = build_deploy_config(self.rollout_adapter, self.mode, layout, options)
        work_dir = Path(tempfile.mkdtemp(prefix=f"omni_rl_deploy_{self.replica_rank}_"))
        path = write_deploy_config(deploy, work_dir / "deploy.yaml")
        driver = VllmOmniDriver(
            start_async_omni(self.model_config.local_path, str(path)), self.rollout_adapter, self.mode,
            dedup_pad_tokens=dedup_function(self.processor), keep_stage_outputs=bool(self.field_specs),
            prompt_information=self.rollout_adapter.engine_prompt_information(self.mode, self.model_config.hf_config),
        )
        self.engine = driver  # type: ignore[assignment]  # verl types it as vLLM's AsyncLLM
        await driver.reset_mm_cache()
        await self.mask_policy_logits(driver)
        # No HTTP app: verl's agent loop reaches this server through its Ray handle. verl keys
        # its load balancer by "ip:port", so each replica needs a port of its own (a constant
        # would merge the replicas of a node into one): a free one, held open as a reservation.
        reserve_server_port(self)

    async def mask_policy_logits(self, driver: VllmOmniDriver) -> LogitMask:
        """As verl's vLLM server does at start-up (``monkey_patch_model``, which also patches
        the MoE weight loader): mask the policy stage's out-of-vocabulary tail and the ids it
        must never sample, in that stage's own vocabulary (:func:`policy_logit_mask`). A text
        policy: every placeholder the adapter's processor declares (audio too; verl's own list
        has image and video only, and its processor is None for Qwen3-Omni). A talker: its
        codec control ids; the thinker's placeholders lie past its logits (on a GPU, verl's
        ``index_fill_`` with them is a device-side assert)."""
        mask = policy_logit_mask(
            self.rollout_adapter, self.mode, self.model_config.hf_config, self.processor, self.model_config.tokenizer
        )
        await driver.collective_rpc(
            "monkey_patch_model",
            kwargs={"vocab_size": mask.vocab_size, "banned_token_ids": list(mask.banned_token_ids)},
            stage_ids=[driver.policy_stage],
        )
        return mask

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict[str, Any]:
        """Abort one request through the driver (verl's writes into vLLM's output processor).

        ``reset_prefix_cache`` is not acted on: one abort changes no weights, so the cached
        prefixes stay valid (vLLM's own reset skips a cache other requests still use).
        """
        if self.node_rank != 0:
            return {"aborted": False, "request_id": request_id}
        driver: VllmOmniDriver = self.engine  # type: ignore[assignment]
        if request_id not in driver.in_flight_request_ids():
            return {"aborted": False, "error": f"Request {request_id} not found"}
        await driver.abort(request_id)
        logger.info("Aborted request: %s", request_id)
        return {"aborted": True, "request_id": request_id}


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
