"""The one place that calls into vLLM-Omni: start a replica, generate, shut down.

Everything around it (deploy config, prompts, output conversion, weight-sync plan) is
pure and CPU-tested; this module only wires those pieces to ``vllm_omni.Omni`` and is
exercised by ``tests/gpu/test_vllm_omni_rollout.py``. vLLM and vLLM-Omni are imported
inside the methods that need them (gpu extra), so importing ``omni_rollout`` stays light.

Each sample is its own request (``n`` copies of a prompt), so an abort or a preemption
touches one sample and every output maps back to exactly one (prompt, sample) pair.
Colocated sleep/wake and weight loading are planned in ``weight_sync`` but not yet
driven from here (they need ``AsyncOmni`` and a GPU to test).
"""

from __future__ import annotations

from collections import defaultdict
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
from omni_rollout.vllm_omni.outputs import ConvertedRequest, convert_request
from omni_rollout.vllm_omni.prompts import DedupPadTokens, build_engine_prompt


class EngineNotStartedError(RuntimeError):
    """``generate`` was called before ``start`` (or after ``close``)."""


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
        from vllm import SamplingParams  # type: ignore[import-not-found]

        return SamplingParams(
            n=1,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_tokens=self.max_tokens,
            seed=None if self.seed is None else self.seed + seed_offset,
            stop_token_ids=list(self.stop_token_ids) or None,
            logprobs=0,
            **self.extra,
        )


class VllmOmniEngine:
    """One vLLM-Omni rollout replica driven offline (``vllm_omni.Omni``)."""

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

    def start(self) -> None:
        """Write this replica's deploy config and start the engine on it."""
        from vllm_omni.entrypoints.omni import Omni

        config = build_deploy_config(self.adapter, self.mode, self.layout, self.options)
        name = f"deploy_{config['pipeline']}_replica{self.layout.replica_rank}.yaml"
        self.deploy_path = write_deploy_config(config, self.work_dir / name)
        self._omni = Omni(
            model=self.model_path, deploy_config=str(self.deploy_path), **self.omni_kwargs
        )

    def generate(
        self, requests: Sequence[EngineRequest], sampling: PolicySampling
    ) -> list[list[ConvertedRequest]]:
        """``sampling.n`` converted samples per request, in request order."""
        if self._omni is None:
            raise EngineNotStartedError("Call VllmOmniEngine.start() before generate().")
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
        results: list[list[ConvertedRequest]] = [[] for _ in requests]
        # vLLM-Omni takes one sampling-params list for a whole batch. Unseeded: one batch
        # with n copies of each prompt. Seeded: n batches with seeds seed, seed+1, ...,
        # since n copies sharing one seed would sample the same tokens.
        # Fresh dicts per request: the engine may annotate a prompt it is handed.
        if sampling.seed is None:
            rounds = [([dict(p) for _ in range(sampling.n) for p in prompts], 0)]
        else:
            rounds = [([dict(p) for p in prompts], k) for k in range(sampling.n)]
        for batch, seed_offset in rounds:
            grouped = self._run(batch, self._sampling_params_list(sampling, seed_offset))
            for position in range(len(batch)):
                index = position % len(requests)
                results[index].append(
                    convert_request(
                        self.adapter,
                        self.mode,
                        requests[index].prompt_ids,
                        grouped.get(position, []),
                    )
                )
        return results

    def _sampling_params_list(self, sampling: PolicySampling, seed_offset: int) -> list[Any]:
        policy_id = self.adapter.policy_stage_id(self.mode)
        params = list(self._omni.default_sampling_params_list)
        params[policy_id] = sampling.to_vllm(seed_offset)
        return params

    def _run(self, prompts: list[dict[str, Any]], params: list[Any]) -> dict[int, list[Any]]:
        """Generate and group the per-stage outputs by prompt position.

        ``Omni`` names request ``i`` of a batch ``"{i}_<uuid>"``; outputs come back per
        finished stage, in completion order, so they are regrouped by that index.
        """
        outputs = self._omni.generate(prompts, params, use_tqdm=False)
        grouped: dict[int, list[Any]] = defaultdict(list)
        for output in outputs:
            prefix = str(output.request_id).split("_", 1)[0]
            if not prefix.isdigit():
                raise RuntimeError(
                    f"Unexpected vLLM-Omni request id {output.request_id!r}; expected "
                    "'<index>_<uuid>' (Omni 0.28 naming). The engine module needs updating."
                )
            grouped[int(prefix)].append(output)
        for stage_outputs in grouped.values():
            stage_outputs.sort(key=lambda o: o.stage_id if o.stage_id is not None else 0)
        return grouped

    def close(self) -> None:
        """Shut the engine down; safe to call twice."""
        if self._omni is not None:
            self._omni.close()
            self._omni = None
