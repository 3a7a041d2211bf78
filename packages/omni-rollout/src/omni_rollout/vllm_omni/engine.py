"""The one place that calls into vLLM-Omni: start a replica, generate, sync weights, shut down.

Everything around it (deploy config, prompts, output conversion, weight-sync plan, payload
staging) is pure and CPU-tested; this module wires those pieces to ``vllm_omni.AsyncOmni``
and is exercised on a GPU by ``tests/gpu/test_vllm_omni_rollout.py``. vLLM and vLLM-Omni
are imported inside the methods that need them (gpu extra), so importing ``omni_rollout``
stays light.

Why ``AsyncOmni`` and not the offline ``Omni``: in vLLM-Omni 0.28 ``Omni`` exposes only
``generate``, ``abort``, profiling and ``engine.collective_rpc``; its ``generate`` takes no
``lora_request``, so an adapter synced from the actor could never be served. ``AsyncOmni``
has the trainer-facing API (``pause_generation``, ``sleep``, ``wake_up``,
``resume_generation``, ``collective_rpc``, ``generate(..., lora_request=...)``). The
engine drives it from a private event loop on its own thread (:class:`LoopThread`), so its
own API stays synchronous.

Each sample is its own request (``n`` copies of a prompt, sample ``k`` seeded
``seed + k``), so an abort or a preemption touches one sample and every output maps back to
exactly one (prompt, sample) pair.

Weight sync follows a :class:`WeightSyncPlan` (see ``weight_sync``); how each step maps to
vLLM-Omni 0.28 is documented on :meth:`VllmOmniEngine.after_train`.
"""

from __future__ import annotations

import asyncio
import copy
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_contracts import RolloutAdapter

from omni_rollout.vllm_omni.deploy_config import (
    DeployOptions,
    build_deploy_config,
    write_deploy_config,
)
from omni_rollout.vllm_omni.devices import ReplicaLayout
from omni_rollout.vllm_omni.loop_thread import LoopThread
from omni_rollout.vllm_omni.outputs import ConvertedRequest, convert_request
from omni_rollout.vllm_omni.prompts import DedupPadTokens, build_engine_prompt
from omni_rollout.vllm_omni.weight_payloads import (
    FullWeights,
    LoraWeights,
    stage_full,
    stage_lora,
)
from omni_rollout.vllm_omni.weight_sync import SyncStep, WeightSyncError, WeightSyncPlan

LORA_NAME_PREFIX = "omni-rl-policy"
LORA_STAGE_ID = 0
"""The only stage a request's LoRA reaches in vLLM-Omni 0.28: ``AsyncOmni.generate`` hands
``lora_request`` to stage 0's input processing; later stages get none."""


class EngineNotStartedError(RuntimeError):
    """``generate`` or a sync was called before ``start`` (or after ``close``)."""


class EnginePausedError(RuntimeError):
    """``generate`` was called between ``before_train`` and ``after_train``."""


@dataclass(frozen=True)
class EngineRequest:
    """One prompt to sample from, as the dataset and processor produced it."""

    prompt_ids: Sequence[int]
    multi_modal_data: Mapping[str, Any] | None = None
    mm_processor_kwargs: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class PolicySampling:
    """Sampling of the policy stage; the other stages keep their deploy defaults.

    ``logprobs=0`` asks vLLM for the sampled token's log-prob only, which is what the
    trainer compares with the actor's. ``top_k=0`` disables top-k (vLLM 0.28's spelling).
    Which distribution the log-prob is taken from (raw or after temperature/top-p) is
    the engine's ``logprobs_mode``, set through ``DeployOptions.logprobs_mode``.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 256
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_vllm(self, seed_offset: int = 0) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        return SamplingParams(
            n=1,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_tokens=self.max_tokens,
            seed=None if self.seed is None else self.seed + seed_offset,
            stop_token_ids=list(self.stop_token_ids) or None,
            logprobs=0,
            # One output per finished stage, as the offline Omni forces for LLM stages.
            output_kind=RequestOutputKind.FINAL_ONLY,
            **self.extra,
        )


@dataclass(frozen=True)
class ServedLora:
    """The adapter version the engine currently serves on stage 0.

    Attributes:
        name: unique per version (vLLM compares ``LoRARequest`` objects by name).
        int_id: fresh per version (vLLM caches adapters by id); equals the weight version.
        path: the staged PEFT adapter directory vLLM loads from on first use.
    """

    name: str
    int_id: int
    path: Path

    def to_vllm(self) -> Any:
        from vllm.lora.request import LoRARequest

        return LoRARequest(lora_name=self.name, lora_int_id=self.int_id, lora_path=str(self.path))


def _final_only(params: Any) -> Any:
    """A copy of a stage's default params that reports once, when the stage finishes."""
    if not hasattr(params, "output_kind"):
        return params
    from vllm.sampling_params import RequestOutputKind

    params = copy.deepcopy(params)
    params.output_kind = RequestOutputKind.FINAL_ONLY
    return params


def _rpc_failures(results: Sequence[Any]) -> list[Any]:
    """vLLM-Omni's stage pool reports a failed RPC as ``{"supported": False, "error": ...}``."""
    return [
        result
        for result in results
        if isinstance(result, dict) and (result.get("error") or result.get("supported") is False)
    ]


class VllmOmniEngine:
    """One vLLM-Omni rollout replica (``vllm_omni.AsyncOmni`` on a private loop)."""

    def __init__(
        self,
        model_path: str | Path,
        adapter: RolloutAdapter,
        mode: str,
        *,
        layout: ReplicaLayout,
        options: DeployOptions,
        work_dir: str | Path,
        dedup_pad_tokens: DedupPadTokens | None = None,
        omni_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.model_path = str(model_path)
        self.adapter = adapter
        self.mode = mode
        self.layout = layout
        self.options = options
        self.work_dir = Path(work_dir)
        self.dedup_pad_tokens = dedup_pad_tokens
        self.omni_kwargs = dict(omni_kwargs or {})
        self.deploy_path: Path | None = None
        self._omni: Any = None
        self._runner: LoopThread | None = None
        self._weight_version = 0
        self._versions_issued = 0
        self._served_lora: ServedLora | None = None
        self._paused = False
        self._batches = 0

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Write this replica's deploy config and start the engine on it."""
        from vllm_omni.entrypoints.async_omni import AsyncOmni

        config = build_deploy_config(self.adapter, self.mode, self.layout, self.options)
        name = f"deploy_{config['pipeline']}_replica{self.layout.replica_rank}.yaml"
        self.deploy_path = write_deploy_config(config, self.work_dir / name)
        deploy_path = str(self.deploy_path)

        async def construct() -> Any:
            # Built on the loop that will run it, as vLLM-Omni's own server does.
            return AsyncOmni(model=self.model_path, deploy_config=deploy_path, **self.omni_kwargs)

        runner = LoopThread()
        try:
            omni = runner.run(construct())
        except BaseException:
            runner.close()
            raise
        self._attach(omni, runner)

    def _attach(self, omni: Any, runner: LoopThread | None = None) -> None:
        """Use an already built ``AsyncOmni``-like object (``start`` and tests)."""
        self._omni = omni
        self._runner = runner or LoopThread()

    def close(self) -> None:
        """Shut the engine down; safe to call twice."""
        omni, runner = self._omni, self._runner
        self._omni, self._runner = None, None
        if runner is None:
            return
        try:
            if omni is not None:

                async def shutdown() -> None:
                    omni.shutdown()

                runner.run(shutdown())
        finally:
            runner.close()

    @property
    def weight_version(self) -> int:
        """How many weight syncs have completed (0: the checkpoint's weights)."""
        return self._weight_version

    @property
    def served_lora(self) -> ServedLora | None:
        """The adapter every following ``generate`` request carries, if any."""
        return self._served_lora

    def _runner_or_raise(self) -> LoopThread:
        if self._omni is None or self._runner is None:
            raise EngineNotStartedError(
                "The vLLM-Omni engine is not running; call VllmOmniEngine.start() first."
            )
        return self._runner

    # ---- generation ------------------------------------------------------------------

    def generate(
        self, requests: Sequence[EngineRequest], sampling: PolicySampling
    ) -> list[list[ConvertedRequest]]:
        """``sampling.n`` converted samples per request, in request order.

        Raises:
            EngineNotStartedError: before ``start`` or after ``close``.
            EnginePausedError: between ``before_train`` and ``after_train`` (the engine
                would wait for ``resume_generation`` forever).
        """
        runner = self._runner_or_raise()
        if self._paused:
            raise EnginePausedError(
                "The engine is paused for training; call after_train(plan, weights) to sync "
                "weights and resume before generating."
            )
        if not requests:
            return []
        prompts = [
            build_engine_prompt(
                self.adapter,
                request.prompt_ids,
                request.multi_modal_data,
                request.mm_processor_kwargs,
                dedup_pad_tokens=self.dedup_pad_tokens,
            )
            for request in requests
        ]
        # Unseeded samples share params; seeded sample k gets seed + k, since n requests
        # sharing one seed would sample the same tokens.
        jobs = [(index, k) for index in range(len(requests)) for k in range(sampling.n)]
        params = {
            k: self._sampling_params_list(sampling, k)
            for k in (range(sampling.n) if sampling.seed is not None else (0,))
        }
        lora = None if self._served_lora is None else self._served_lora.to_vllm()
        self._batches += 1
        batch = self._batches
        outputs = runner.run(
            self._generate_all(
                [
                    (
                        # A fresh dict per request: the engine annotates the prompt it gets.
                        dict(prompts[index]),
                        params[k if sampling.seed is not None else 0],
                        f"omni-rl-{batch}-{index}-{k}",
                    )
                    for index, k in jobs
                ],
                lora,
            )
        )
        results: list[list[ConvertedRequest]] = [[] for _ in requests]
        for (index, _), stage_outputs in zip(jobs, outputs, strict=True):
            results[index].append(
                convert_request(
                    self.adapter, self.mode, requests[index].prompt_ids, stage_outputs
                )
            )
        return results

    def _sampling_params_list(self, sampling: PolicySampling, seed_offset: int) -> list[Any]:
        policy_id = self.adapter.policy_stage_id(self.mode)
        params = [_final_only(p) for p in self._omni.default_sampling_params_list]
        params[policy_id] = sampling.to_vllm(seed_offset)
        return params

    async def _generate_all(
        self, jobs: Sequence[tuple[dict[str, Any], list[Any], str]], lora: Any
    ) -> list[list[Any]]:
        return list(
            await asyncio.gather(
                *(self._collect(prompt, params, rid, lora) for prompt, params, rid in jobs)
            )
        )

    async def _collect(
        self, prompt: dict[str, Any], params: list[Any], request_id: str, lora: Any
    ) -> list[Any]:
        """The last output of each final stage of one request, in stage order."""
        last: dict[int, Any] = {}
        async for output in self._omni.generate(
            prompt, request_id=request_id, sampling_params_list=params, lora_request=lora
        ):
            stage_id = getattr(output, "stage_id", None)
            last[0 if stage_id is None else int(stage_id)] = output
        return [last[stage_id] for stage_id in sorted(last)]

    # ---- weight sync -----------------------------------------------------------------

    def check_plan(self, plan: WeightSyncPlan) -> None:
        """Refuse a plan this engine and vLLM-Omni 0.28 cannot carry out, before any call.

        Raises:
            WeightSyncError: every problem found, with how to fix each.
        """
        errors: list[str] = []
        known = sorted(stage.stage_id for stage in self.adapter.build_stage_configs(self.mode))
        unknown = sorted(set(plan.stage_ids) - set(known))
        if unknown:
            errors.append(
                f"the plan syncs stages {unknown}, which mode {self.mode!r} does not have "
                f"(stages {known}); build it with plan_weight_sync(adapter, {self.mode!r}, ...)"
            )
        if plan.colocated and not self.options.enable_sleep_mode:
            errors.append(
                "a colocated plan sleeps the engine, but it was started with "
                "enable_sleep_mode=False; set DeployOptions(enable_sleep_mode=True)"
            )
        if any(step.action == "sleep" and step.level == 2 for step in plan.before_train):
            errors.append(
                "vLLM-Omni 0.28's AsyncOmni.wake_up raises NotImplementedError after "
                "sleep(level=2); plan with sleep_level=1"
            )
        if plan.payload == "lora":
            if not self.options.enable_lora:
                errors.append(
                    "a LoRA plan needs an engine started with DeployOptions(enable_lora=True, "
                    "max_lora_rank=<actor rank>)"
                )
            if set(plan.stage_ids) != {LORA_STAGE_ID}:
                errors.append(
                    f"vLLM-Omni 0.28 serves a request's LoRA on stage {LORA_STAGE_ID} only "
                    f"(AsyncOmni.generate(lora_request=...)); the plan names stages "
                    f"{list(plan.stage_ids)}; sync other stages with payload='full'"
                )
        if errors:
            raise WeightSyncError("Cannot run this weight-sync plan: " + "; ".join(errors) + ".")

    def before_train(self, plan: WeightSyncPlan) -> None:
        """Run ``plan.before_train`` (colocated: pause, then sleep) once rollout is done.

        Raises:
            WeightSyncError: the plan cannot run here (see :meth:`check_plan`).
            EngineNotStartedError: the engine is not running.
        """
        self.check_plan(plan)
        runner = self._runner_or_raise()
        if plan.before_train:
            self._paused = True
        runner.run(self._execute(plan.before_train, None))

    def after_train(self, plan: WeightSyncPlan, weights: LoraWeights | FullWeights) -> None:
        """Send the new weights and make the engine ready to generate (``plan.after_train``).

        Every call takes a new version number (also after a failure). The payload is
        staged on disk first (``work_dir/weights/v<version>``; see
        ``weight_payloads`` for why), then the steps map to vLLM-Omni 0.28 as:

        - ``pause_generation`` -> ``AsyncOmni.pause_generation(mode="abort")``;
        - ``sleep`` -> ``AsyncOmni.sleep(level=...)`` (whole pipeline);
        - ``wake_up`` -> ``AsyncOmni.wake_up(tags=[...])`` (weights, then kv_cache);
        - ``add_lora`` -> the adapter becomes :attr:`served_lora` under a fresh id and
          name; every later ``generate`` request carries it and stage 0 loads it from the
          staged directory on first use (``AsyncOmni.add_lora`` is not used: it sends the
          ``LoRARequest`` untyped through ``collective_rpc`` and counts a failure as success);
        - ``load_weights`` -> ``AsyncOmni.collective_rpc("reload_weights", kwargs=
          {"weights_path": <dir>, "is_checkpoint_format": True}, stage_ids=[...])``, the
          vLLM worker's in-place reload, on the plan's stages only;
        - ``resume_generation`` -> ``AsyncOmni.resume_generation()``.

        Raises:
            WeightSyncError: the plan cannot run here, the payload type does not match
                ``plan.payload``, or a stage reports that loading failed.
            PayloadError: the payload cannot be staged.
            EngineNotStartedError: the engine is not running.
        """
        self.check_plan(plan)
        runner = self._runner_or_raise()
        expected = LoraWeights if plan.payload == "lora" else FullWeights
        if not isinstance(weights, expected):
            raise WeightSyncError(
                f"The plan's payload is {plan.payload!r}, which takes {expected.__name__}, "
                f"but got {type(weights).__name__}."
            )
        # Issued even if this sync fails, so a retry never reuses a LoRA id or directory
        # that vLLM may already have cached.
        self._versions_issued += 1
        version = self._versions_issued
        directory = self.work_dir / "weights" / f"v{version}"
        if isinstance(weights, LoraWeights):
            staged = stage_lora(weights, directory)
        else:
            staged = stage_full(weights, directory)
        try:
            runner.run(self._execute(plan.after_train, (staged, version)))
        except BaseException:
            if self._served_lora is None or self._served_lora.path != staged:
                shutil.rmtree(staged, ignore_errors=True)
            raise
        self._weight_version = version
        if plan.payload == "full":
            shutil.rmtree(staged, ignore_errors=True)

    async def _execute(self, steps: Sequence[SyncStep], staged: tuple[Path, int] | None) -> None:
        for step in steps:
            await self._execute_step(step, staged)

    async def _execute_step(self, step: SyncStep, staged: tuple[Path, int] | None) -> None:
        omni = self._omni
        stage_ids = list(step.stage_ids) or None
        if step.action == "pause_generation":
            await omni.pause_generation(mode="abort", clear_cache=True, stage_ids=stage_ids)
        elif step.action == "sleep":
            await omni.sleep(stage_ids=stage_ids, level=step.level or 1, mode="abort")
        elif step.action == "wake_up":
            await omni.wake_up(stage_ids=stage_ids, tags=list(step.tags) or None)
        elif step.action == "resume_generation":
            await omni.resume_generation(stage_ids=stage_ids)
            self._paused = False
        elif step.action in ("add_lora", "load_weights"):
            if staged is None:
                raise WeightSyncError(
                    f"Step {step.action!r} needs weights; it belongs in after_train."
                )
            path, version = staged
            if step.action == "add_lora":
                self._serve_lora(path, version)
            else:
                await self._reload_weights(step.stage_ids, path)
        else:
            raise WeightSyncError(
                f"Unknown weight-sync action {step.action!r}; valid: pause_generation, sleep, "
                "wake_up, add_lora, load_weights, resume_generation."
            )

    def _serve_lora(self, path: Path, version: int) -> None:
        previous = self._served_lora
        self._served_lora = ServedLora(f"{LORA_NAME_PREFIX}-v{version}", version, path)
        # No request carries the previous version any more; vLLM evicts it from its
        # adapter cache (LRU, max_loras / max_cpu_loras) when the slot is needed.
        if previous is not None and previous.path != path:
            shutil.rmtree(previous.path, ignore_errors=True)

    async def _reload_weights(self, stage_ids: Sequence[int], path: Path) -> None:
        results = await self._omni.collective_rpc(
            "reload_weights",
            kwargs={"weights_path": str(path), "is_checkpoint_format": True},
            stage_ids=list(stage_ids),
        )
        failures = _rpc_failures(results)
        if failures or not results:
            raise WeightSyncError(
                f"Loading full weights into stages {list(stage_ids)} failed: "
                f"{failures or 'no stage answered'}. The payload's names must be the "
                "checkpoint's (e.g. 'thinker.model.layers.0....')."
            )
