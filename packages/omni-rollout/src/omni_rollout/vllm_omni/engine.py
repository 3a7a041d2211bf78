"""A synchronous vLLM-Omni rollout replica: start, generate, sync weights, shut down.

Everything around it (deploy config, prompts, output conversion, weight-sync plan, payload
staging) is pure and CPU-tested; every call into ``vllm_omni.AsyncOmni`` goes through the one
driver (:class:`~omni_rollout.vllm_omni.driver.VllmOmniDriver`, also what verl's server
uses), and this module adds weight-sync plans and LoRA versions on top. It is exercised on a
GPU by ``tests/gpu/test_vllm_omni_rollout.py``. vLLM and vLLM-Omni are imported inside the
methods that need them (gpu extra), so importing ``omni_rollout`` stays light.

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
import shutil
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from omni_contracts import RolloutAdapter

from omni_rollout.vllm_omni import compat
from omni_rollout.vllm_omni.deploy_config import (
    DeployOptions,
    build_deploy_config,
    write_deploy_config,
)
from omni_rollout.vllm_omni.devices import ReplicaLayout
from omni_rollout.vllm_omni.driver import StageRpcError, VllmOmniDriver, start_async_omni
from omni_rollout.vllm_omni.loop_thread import LoopThread
from omni_rollout.vllm_omni.outputs import ConvertedRequest, convert_request
from omni_rollout.vllm_omni.prompts import DedupPadTokens
from omni_rollout.vllm_omni.weight_payloads import (
    FullWeights,
    LoraWeights,
    stage_full,
    stage_lora,
    synced_only,
)
from omni_rollout.vllm_omni.weight_sync import SyncStep, WeightSyncError, WeightSyncPlan

T = TypeVar("T")
LORA_NAME_PREFIX = "omni-rl-policy"
LORA_STAGE_ID = compat.LORA_STAGE_ID


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
        self._driver: VllmOmniDriver | None = None
        self._runner: LoopThread | None = None
        self._weight_version = 0
        self._versions_issued = 0
        self._served_lora: ServedLora | None = None
        self._paused = False
        self._batches = 0

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Write this replica's deploy config and start the engine on it."""
        config = build_deploy_config(self.adapter, self.mode, self.layout, self.options)
        name = f"deploy_{config['pipeline']}_replica{self.layout.replica_rank}.yaml"
        self.deploy_path = write_deploy_config(config, self.work_dir / name)
        deploy_path = str(self.deploy_path)

        async def construct() -> Any:
            # Built on the loop that will run it, as vLLM-Omni's own server does.
            return start_async_omni(self.model_path, deploy_path, **self.omni_kwargs)

        runner = LoopThread()
        try:
            omni = runner.run(construct())
        except BaseException:
            runner.close()
            raise
        self._attach(omni, runner)

    def _attach(self, omni: Any, runner: LoopThread | None = None) -> None:
        """Use an already built ``AsyncOmni``-like object (``start`` and tests)."""
        self._driver = VllmOmniDriver(omni, self.adapter, self.mode, dedup_pad_tokens=self.dedup_pad_tokens)
        self._runner = runner or LoopThread()

    def close(self) -> None:
        """Shut the engine down; safe to call twice."""
        driver, runner = self._driver, self._runner
        self._driver, self._runner = None, None
        if runner is None:
            return
        try:
            if driver is not None:

                async def shutdown() -> None:
                    driver.shutdown()

                runner.run(shutdown())
        finally:
            runner.close()

    def run(self, call: Callable[[VllmOmniDriver], Coroutine[Any, Any, T]]) -> T:
        """Run ``call(driver)`` on the engine's loop: the driver's calls this API does not wrap
        (cache clearing, verl's server code in tests)."""
        runner, driver = self._running()
        return runner.run(call(driver))

    @property
    def weight_version(self) -> int:
        """How many weight syncs have completed (0: the checkpoint's weights)."""
        return self._weight_version

    @property
    def served_lora(self) -> ServedLora | None:
        """The adapter every following ``generate`` request carries, if any."""
        return self._served_lora

    def _running(self) -> tuple[LoopThread, VllmOmniDriver]:
        if self._driver is None or self._runner is None:
            raise EngineNotStartedError(
                "The vLLM-Omni engine is not running; call VllmOmniEngine.start() first."
            )
        return self._runner, self._driver

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
        runner, driver = self._running()
        if self._paused:
            raise EnginePausedError(
                "The engine is paused for training; call after_train(plan, weights) to sync "
                "weights and resume before generating."
            )
        if not requests:
            return []
        prompts = [
            driver.build_prompt(request.prompt_ids, request.multi_modal_data, request.mm_processor_kwargs)
            for request in requests
        ]
        # Unseeded samples share params; seeded sample k gets seed + k, since n requests
        # sharing one seed would sample the same tokens.
        jobs = [(index, k) for index in range(len(requests)) for k in range(sampling.n)]
        params = {
            k: driver.stage_params(sampling.to_vllm(k))
            for k in (range(sampling.n) if sampling.seed is not None else (0,))
        }
        lora = None if self._served_lora is None else self._served_lora.to_vllm()
        self._batches += 1
        batch = self._batches
        outputs = runner.run(
            self._generate_all(
                driver,
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

    @staticmethod
    async def _generate_all(
        driver: VllmOmniDriver, jobs: Sequence[tuple[dict[str, Any], list[Any], str]], lora: Any
    ) -> list[list[Any]]:
        return list(
            await asyncio.gather(
                *(driver.collect(prompt, params, rid, lora_request=lora) for prompt, params, rid in jobs)
            )
        )

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
        runner, driver = self._running()
        if plan.before_train:
            self._paused = True
        runner.run(self._execute(driver, plan.before_train, None))

    def after_train(self, plan: WeightSyncPlan, weights: LoraWeights | FullWeights) -> None:
        """Send the new weights and make the engine ready to generate (``plan.after_train``).

        Every call takes a new version number (also after a failure). The payload is
        staged on disk first (``work_dir/weights/v<version>``; see
        ``weight_payloads`` for why); full weights are cut to the names the adapter's
        ``weight_sync_prefixes`` gives (a talker's sync stages ``talker.*`` only, not the
        frozen thinker). Then the steps map to vLLM-Omni 0.28 as:

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
        - ``resume_generation`` -> ``AsyncOmni.resume_generation()`` unless the driver's last
          ``wake_up`` already resumed (it does once nothing sleeps).

        Raises:
            WeightSyncError: the plan cannot run here, the payload type does not match
                ``plan.payload``, or a stage reports that loading failed.
            PayloadError: the payload cannot be staged.
            EngineNotStartedError: the engine is not running.
        """
        self.check_plan(plan)
        runner, driver = self._running()
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
            staged = stage_full(synced_only(weights, self.adapter.weight_sync_prefixes(self.mode)), directory)
        try:
            runner.run(self._execute(driver, plan.after_train, (staged, version)))
        except BaseException:
            if self._served_lora is None or self._served_lora.path != staged:
                shutil.rmtree(staged, ignore_errors=True)
            raise
        self._weight_version = version
        if plan.payload == "full":
            shutil.rmtree(staged, ignore_errors=True)

    async def _execute(
        self, driver: VllmOmniDriver, steps: Sequence[SyncStep], staged: tuple[Path, int] | None
    ) -> None:
        for step in steps:
            await self._execute_step(driver, step, staged)

    async def _execute_step(
        self, driver: VllmOmniDriver, step: SyncStep, staged: tuple[Path, int] | None
    ) -> None:
        stage_ids = list(step.stage_ids) or None
        if step.action == "pause_generation":
            await driver.pause_generation(mode="abort", clear_cache=True, stage_ids=stage_ids)
        elif step.action == "sleep":
            await driver.sleep(level=step.level or 1, mode="abort", stage_ids=stage_ids)
        elif step.action == "wake_up":
            # The driver resumes scheduling itself once the last tag is awake.
            await driver.wake_up(tags=list(step.tags) or None, stage_ids=stage_ids)
        elif step.action == "resume_generation":
            if await driver.is_paused():
                await driver.resume_generation(stage_ids=stage_ids)
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
                await self._reload_weights(driver, step.stage_ids, path)
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

    @staticmethod
    async def _reload_weights(driver: VllmOmniDriver, stage_ids: Sequence[int], path: Path) -> None:
        try:
            await driver.collective_rpc(
                "reload_weights",
                kwargs={"weights_path": str(path), "is_checkpoint_format": True},
                stage_ids=list(stage_ids),
            )
        except StageRpcError as error:
            raise WeightSyncError(
                f"Loading full weights into stages {list(stage_ids)} failed: {error}. The payload's "
                "names must be the checkpoint's (e.g. 'thinker.model.layers.0....')."
            ) from error
