"""Generate vLLM-Omni's deploy config from a rollout adapter's pipeline.

vLLM-Omni reads a deploy YAML (``deploy_config=<path>``) whose top level names the
registered pipeline (``pipeline:``) and pipeline-wide engine settings, and whose
``stages:`` list carries per-stage knobs keyed by ``stage_id``: ``devices`` (logical ids
into ``CUDA_VISIBLE_DEVICES``), ``tensor_parallel_size``, memory and batching limits.
Keys its schema does not model (``hf_overrides``, ``enable_sleep_mode``, ...) pass through
to the stage's vLLM engine arguments. The topology itself (which stage feeds which) comes
from the pipeline registered under that name, so this module only checks that the
adapter's stages are well formed and writes placement and knobs for each.

Precedence per stage: generated knobs, then ``hf_overrides`` from the adapter, then (for
every stage but the policy) the ``default_sampling_params`` of vLLM-Omni's own deploy file
for the pipeline (``upstream_deploy_file``), then the adapter's ``get_stage_engine_extras``
(a model package knows what its engine needs).
Extras may not touch the placement keys; that is an error, not a silent override.

The file is written as JSON, which is valid YAML, so no YAML library is needed.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_contracts import RolloutAdapter, validate_stage_topology

from omni_rollout.vllm_omni.compat import LORA_STAGE_ID
from omni_rollout.vllm_omni.devices import ReplicaLayout, place_stages

PLACEMENT_KEYS = frozenset({"stage_id", "devices", "tensor_parallel_size", "num_replicas"})
"""Stage keys owned by the device placement; adapter extras may not set them."""


class DeployConfigError(ValueError):
    """The deploy config cannot be generated from the given adapter and options."""


@dataclass(frozen=True)
class DeployOptions:
    """Engine knobs for the policy stage, plus pipeline-wide settings.

    Attributes:
        gpu_memory_utilization: fraction of GPU memory the policy stage may pre-allocate
            (weights + KV pool); see ``omni_rollout.memory_planner``.
        max_num_seqs: concurrent sequences; also bounds in-flight encoder outputs.
        max_model_len: prompt + response token budget; ``None`` keeps the model's.
        cudagraph_capture_sizes: batch sizes captured as CUDA graphs; ``None`` keeps
            vLLM's default (largest = min(2 x max_num_seqs, 512)).
        enforce_eager: disable CUDA graphs entirely (debugging, tiny models).
        enable_sleep_mode: required for colocated training (sleep/wake between steps).
        enable_prefix_caching: off by default: n samples of a prompt share its prefix,
            but RL log-probs must not depend on cache state.
        dtype: model dtype for every stage (``"bfloat16"``, ``"auto"``, ...).
        trust_remote_code: passed to every stage.
        async_chunk: stream stage-to-stage chunks; RL wants complete outputs, so off.
        enable_lora / max_lora_rank: policy stage serves a LoRA adapter synced from the actor.
        logprobs_mode: vLLM's choice of returned log-probs (``"raw_logprobs"``, the
            default, or ``"processed_logprobs"``: after temperature/top-p, i.e. the
            distribution actually sampled from); ``None`` keeps vLLM's default.
        extra_policy_args: further vLLM engine arguments for the policy stage.
    """

    gpu_memory_utilization: float = 0.8
    max_num_seqs: int = 256
    max_model_len: int | None = None
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    enforce_eager: bool = False
    enable_sleep_mode: bool = True
    enable_prefix_caching: bool = False
    dtype: str = "bfloat16"
    trust_remote_code: bool = True
    async_chunk: bool = False
    enable_lora: bool = False
    max_lora_rank: int | None = None
    logprobs_mode: str | None = None
    extra_policy_args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        errors = []
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            errors.append(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.max_num_seqs < 1:
            errors.append(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        sizes = self.cudagraph_capture_sizes
        if sizes is not None and (not sizes or any(s < 1 for s in sizes)):
            errors.append(f"cudagraph_capture_sizes must be positive sizes, got {list(sizes)}")
        if self.enable_lora and not self.max_lora_rank:
            errors.append("enable_lora needs max_lora_rank (the actor's LoRA rank)")
        if errors:
            raise DeployConfigError("Invalid deploy options: " + "; ".join(errors) + ".")


def _policy_stage_args(options: DeployOptions) -> dict[str, Any]:
    args: dict[str, Any] = {
        "gpu_memory_utilization": options.gpu_memory_utilization,
        "max_num_seqs": options.max_num_seqs,
        "enforce_eager": options.enforce_eager,
        "enable_sleep_mode": options.enable_sleep_mode,
    }
    if options.max_model_len is not None:
        args["max_model_len"] = options.max_model_len
    if options.cudagraph_capture_sizes is not None:
        args["compilation_config"] = {
            "cudagraph_capture_sizes": sorted(options.cudagraph_capture_sizes)
        }
    if options.logprobs_mode is not None:
        args["logprobs_mode"] = options.logprobs_mode
    if options.enable_lora:
        args["enable_lora"] = True
        args["max_lora_rank"] = options.max_lora_rank
    args.update(options.extra_policy_args)
    return args


def upstream_stage_sampling(file_name: str) -> dict[int, dict[str, Any]]:
    """``default_sampling_params`` by stage id in vLLM-Omni's ``deploy/<file_name>``; ``{}``
    when vLLM-Omni is not installed (nothing will read the config then).

    Raises:
        DeployConfigError: vLLM-Omni is installed but has no such file.
    """
    spec = importlib.util.find_spec("vllm_omni")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(next(iter(spec.submodule_search_locations))) / "deploy" / file_name
    if not path.is_file():
        raise DeployConfigError(f"vLLM-Omni has no deploy file {path}; fix the adapter's upstream_deploy_file.")
    import yaml  # transformers' dependency

    stages = yaml.safe_load(path.read_text()).get("stages") or []
    return {int(stage["stage_id"]): dict(stage["default_sampling_params"]) for stage in stages
            if stage.get("default_sampling_params")}


def build_deploy_config(
    adapter: RolloutAdapter,
    mode: str,
    layout: ReplicaLayout,
    options: DeployOptions | None = None,
) -> dict[str, Any]:
    """The deploy config for one replica, as the dict vLLM-Omni's loader reads.

    Calls ``adapter.ensure_pipeline_registered()`` first, so the pipeline name it writes
    is one vLLM-Omni can resolve.

    Raises:
        UnknownModeError: the adapter has no such mode.
        SchemaError: the adapter's stages do not form a valid pipeline.
        DevicePlacementError: the layout does not fit, or the policy stage is unknown.
        DeployConfigError: adapter extras try to set a placement key, LoRA is asked for on
            a policy stage vLLM-Omni serves no LoRA on, or chunks would stream into a policy
            stage fed by another.
    """
    options = options or DeployOptions()
    adapter.check_mode(mode)
    adapter.ensure_pipeline_registered()
    stages = validate_stage_topology(adapter.build_stage_configs(mode))
    policy_id = adapter.policy_stage_id(mode)
    fed = [stage for stage in stages if stage.stage_id == policy_id and stage.inputs]
    if options.async_chunk and fed:
        raise DeployConfigError(
            f"Mode {mode!r} trains stage {policy_id}, which is fed by stages {list(fed[0].inputs)}; with "
            "async_chunk the policy starts on a partial input, so what it consumed depends on timing and the "
            "actor could not recompute its log-probs. Set DeployOptions(async_chunk=False)."
        )
    if options.enable_lora and policy_id != LORA_STAGE_ID:
        raise DeployConfigError(
            f"Mode {mode!r} trains stage {policy_id}, but vLLM-Omni 0.28 serves a request's LoRA on stage "
            f"{LORA_STAGE_ID} only (AsyncOmni.generate(lora_request=...)); sync full weights "
            "(DeployOptions(enable_lora=False))."
        )
    placements = {p.stage_id: p for p in place_stages(stages, layout, policy_id)}
    hf_overrides = adapter.get_engine_hf_overrides(mode)
    upstream_file = adapter.upstream_deploy_file(mode)
    upstream_sampling = upstream_stage_sampling(upstream_file) if upstream_file else {}

    stage_entries = []
    for stage in stages:
        placement = placements[stage.stage_id]
        entry: dict[str, Any] = {
            "stage_id": stage.stage_id,
            "devices": placement.devices_str,
            "tensor_parallel_size": placement.tensor_parallel_size,
        }
        if stage.stage_id == policy_id:
            entry.update(_policy_stage_args(options))
        if hf_overrides:
            entry["hf_overrides"] = dict(hf_overrides)
        if stage.stage_id != policy_id and stage.stage_id in upstream_sampling:
            entry["default_sampling_params"] = upstream_sampling[stage.stage_id]
        extras = adapter.get_stage_engine_extras(stage.stage_id, mode)
        clashing = sorted(PLACEMENT_KEYS & set(extras))
        if clashing:
            raise DeployConfigError(
                f"{type(adapter).__name__}.get_stage_engine_extras({stage.stage_id}, {mode!r}) "
                f"sets {clashing}, which the replica layout owns; drop them from the extras "
                "and set tensor_parallel_size / gpus_per_replica on the rollout config instead."
            )
        entry.update(extras)
        stage_entries.append(entry)

    return {
        "pipeline": adapter.get_pipeline_id(mode),
        "async_chunk": options.async_chunk,
        "dtype": options.dtype,
        "trust_remote_code": options.trust_remote_code,
        "enable_prefix_caching": options.enable_prefix_caching,
        "stages": stage_entries,
    }


def render_deploy_config(config: dict[str, Any]) -> str:
    """Deterministic text for a deploy config (JSON, valid YAML); used for golden files."""
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def write_deploy_config(config: dict[str, Any], path: str | Path) -> Path:
    """Write ``config`` where vLLM-Omni's ``deploy_config=`` argument can read it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_deploy_config(config))
    return target
