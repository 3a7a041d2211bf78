"""Generate vLLM-Omni's deploy config from a rollout adapter's pipeline.

vLLM-Omni reads a deploy YAML (``deploy_config=<path>``) whose top level names the
registered pipeline (``pipeline:``) and pipeline-wide engine settings, and whose
``stages:`` list carries per-stage knobs keyed by ``stage_id``: ``devices`` (logical ids
into ``CUDA_VISIBLE_DEVICES``), ``tensor_parallel_size``, memory and batching limits.
Keys its schema does not model (``hf_overrides``, ``enable_sleep_mode``, ...) pass through
to the stage's vLLM engine arguments. The topology itself (which stage feeds which) comes
from the pipeline registered under that name, so this module only checks that the
adapter's stages are well formed and writes placement and knobs for each.

The generated file replaces vLLM-Omni's own deploy file for the pipeline (the adapter's
``upstream_deploy_file``, read by :mod:`upstream_deploy`), so each stage starts from that
file's settings and keeps every one this module does not deliberately change: the keys of
:data:`UPSTREAM_CHANGES` (every stage) and :data:`POLICY_UPSTREAM_CHANGES` (the trained
stage), each with its reason. Then, per stage: placement, its memory share and sleep mode;
the policy's knobs (dicts merged key by key, so upstream's ``compilation_config.custom_ops``
stays beside our ``cudagraph_capture_sizes``); ``hf_overrides`` from the adapter; last the
adapter's ``get_stage_engine_extras`` (a model package knows what its engine needs), which
may not touch the placement keys or the memory share: that is an error, not a silent override.

Memory: every stage runs on GPUs the actor trains on, so every stage gets an explicit
``gpu_memory_utilization`` (vLLM's default is 0.92 of the GPU each) and sleep mode. The
rollout's share (``DeployOptions.gpu_memory_utilization``) is split over the stages that
share a device in proportion to the shares vLLM-Omni's file gives them (a stage it gives
none weighs as vLLM's 0.92), so the stages on any one device sum to at most the rollout's
share (:func:`stage_memory_shares`).

The file is written as JSON, which is valid YAML, so no YAML library is needed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any

from omni_contracts import RolloutAdapter, validate_stage_topology

from omni_rollout.vllm_omni.compat import LORA_STAGE_ID
from omni_rollout.vllm_omni.devices import ReplicaLayout, StagePlacement, place_stages
from omni_rollout.vllm_omni.upstream_deploy import UpstreamDeploy, UpstreamDeployError, read_upstream_deploy

PLACEMENT_KEYS = frozenset({"stage_id", "devices", "tensor_parallel_size", "num_replicas"})
"""Stage keys owned by the device placement; adapter extras may not set them."""

OWNED_KEYS = PLACEMENT_KEYS | {"gpu_memory_utilization"}
"""Stage keys adapter extras may not set: the placement, and the memory share (an extra
would break the per-device sum :func:`stage_memory_shares` keeps)."""

PIPELINE_WIDE_KEYS = ("dtype", "trust_remote_code", "enable_prefix_caching")
"""Written once at the top level from :class:`DeployOptions`; vLLM-Omni applies them to every
stage, but a per-stage value overrides the top-level one, so upstream's per-stage copies go."""

VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
"""vLLM's ``CacheConfig.gpu_memory_utilization`` default: what a stage with no share takes."""

UPSTREAM_CHANGES: Mapping[str, str] = MappingProxyType({
    "devices": "placement: the replica layout owns it (devices.place_stages), not upstream's two-GPU example",
    "tensor_parallel_size": "placement: the policy runs at the rollout's TP, every other stage at TP 1",
    "num_replicas": "placement: one generated config per rollout replica",
    "gpu_memory_utilization": "the rollout's share split over the stages on each device, in proportion to "
                              "upstream's own shares (stage_memory_shares); upstream's fill whole GPUs",
    "enable_sleep_mode": "DeployOptions.enable_sleep_mode on every stage: a colocated engine sleeps all "
                         "of them while the actor trains",
    "dtype": "pipeline-wide: DeployOptions.dtype at the top level applies to every stage",
    "trust_remote_code": "pipeline-wide: DeployOptions.trust_remote_code at the top level applies to every stage",
    "enable_prefix_caching": "pipeline-wide: DeployOptions.enable_prefix_caching (off unless the run turns "
                             "it on, as upstream's stages) at the top level applies to every stage",
})
"""Upstream per-stage keys a generated config changes or drops on every stage, and why."""

POLICY_UPSTREAM_CHANGES: Mapping[str, str] = MappingProxyType({
    "default_sampling_params": "the policy's sampling parameters come with every request (the trainer's)",
    "max_num_seqs": "DeployOptions.max_num_seqs: the rollout's concurrency (n samples per prompt)",
    "max_model_len": "DeployOptions.max_model_len: the run's prompt + response budget",
    "enforce_eager": "turned on when DeployOptions.enforce_eager asks; never off where upstream runs eager",
    "compilation_config.cudagraph_capture_sizes": "DeployOptions.cudagraph_capture_sizes (memory planner)",
    "logprobs_mode": "DeployOptions.logprobs_mode: which log-probs the actor is compared with",
    "enable_lora": "DeployOptions.enable_lora: the policy serves the actor's adapter",
    "max_lora_rank": "DeployOptions.max_lora_rank: the actor's LoRA rank",
})
"""Upstream keys the policy stage's knobs replace, and why. Besides these, the caller's
``DeployOptions.extra_policy_args`` (policy stage) and the adapter's
``get_stage_engine_extras`` (its stage) replace upstream's values for the keys they name."""


class DeployConfigError(ValueError):
    """The deploy config cannot be generated from the given adapter and options."""


@dataclass(frozen=True)
class DeployOptions:
    """Engine knobs for the policy stage, plus replica-wide settings.

    Attributes:
        gpu_memory_utilization: fraction of each GPU the rollout replica may pre-allocate
            (weights + KV pools), shared by the stages on that GPU: a policy alone on its
            devices gets all of it, colocated stages split it (:func:`stage_memory_shares`);
            see ``omni_rollout.memory_planner``.
        max_num_seqs: concurrent sequences; also bounds in-flight encoder outputs.
        max_model_len: prompt + response token budget; ``None`` keeps the model's.
        cudagraph_capture_sizes: batch sizes captured as CUDA graphs; ``None`` keeps
            vLLM's default (largest = min(2 x max_num_seqs, 512)).
        enforce_eager: disable CUDA graphs on the policy stage (debugging, tiny models); a
            stage vLLM-Omni's file runs eager stays eager either way.
        all_stages_eager: every stage eager, the policy and the stages around it: on the CPU,
            where there are no CUDA graphs to capture and vLLM would compile each stage with
            inductor at start-up instead (about a minute per stage of the tiny model on 2 cores).
        enable_sleep_mode: every stage; required for colocated training (sleep/wake
            between steps, the whole pipeline).
        enable_prefix_caching: every stage; off by default, as vLLM-Omni's deploy files for
            Qwen3-Omni and Qwen2.5-Omni (and verl-omni) set it: n samples of a prompt share
            its prefix, but RL log-probs must not depend on cache state.
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
    all_stages_eager: bool = False
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


def _policy_stage_args(options: DeployOptions, upstream: Mapping[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = {
        "max_num_seqs": options.max_num_seqs,
        "enforce_eager": (options.enforce_eager or options.all_stages_eager
                          or bool(upstream.get("enforce_eager", False))),
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


def upstream_deploy(file_name: str) -> UpstreamDeploy | None:
    """vLLM-Omni's ``deploy/<file_name>`` resolved for CUDA (:mod:`upstream_deploy`); ``None``
    when vLLM-Omni is not installed (nothing will read the config then).

    Raises:
        DeployConfigError: vLLM-Omni is installed but has no such file, or one this module
            cannot resolve.
    """
    try:
        return read_upstream_deploy(file_name)
    except UpstreamDeployError as error:
        raise DeployConfigError(str(error)) from error


def upstream_stage_sampling(file_name: str) -> dict[int, dict[str, Any]]:
    """``default_sampling_params`` by stage id in vLLM-Omni's ``deploy/<file_name>``; ``{}``
    when vLLM-Omni is not installed.

    Raises:
        DeployConfigError: as :func:`upstream_deploy`.
    """
    deploy = upstream_deploy(file_name)
    if deploy is None:
        return {}
    return {sid: dict(stage["default_sampling_params"]) for sid, stage in deploy.stages.items()
            if stage.get("default_sampling_params")}


def stage_memory_shares(
    placements: Sequence[StagePlacement], weights: Mapping[int, float], share: float
) -> dict[int, float]:
    """Each stage's ``gpu_memory_utilization``: ``share`` split over the stages on a device.

    A stage gets ``share x weight / (sum of the weights on the device)`` on each of its
    devices, the smallest of these when it spans several, rounded down to 1e-4; a stage
    alone on its devices gets ``share`` unchanged. So the stages on any device sum to at most
    ``share`` (vLLM reserves a stage's fraction on every device it runs on).

    Args:
        placements: every stage's devices (:func:`devices.place_stages`).
        weights: a positive weight per stage id, e.g. the shares vLLM-Omni's own deploy
            file gives the stages (where each fills its own GPU).
        share: the rollout's fraction of each GPU, ``DeployOptions.gpu_memory_utilization``.
    """
    on_device: dict[int, Fraction] = {}
    for placement in placements:
        for device in placement.devices:
            on_device[device] = on_device.get(device, Fraction(0)) + Fraction(str(weights[placement.stage_id]))
    total = Fraction(str(share))
    shares = {}
    for placement in placements:
        weight = Fraction(str(weights[placement.stage_id]))
        fraction = min(weight / on_device[device] for device in placement.devices)
        shares[placement.stage_id] = share if fraction == 1 else math.floor(total * fraction * 10_000) / 10_000
    return shares


def _merged(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``update`` over ``base``; where both hold a dict, merged key by key."""
    merged = dict(base)
    for key, value in update.items():
        old = merged.get(key)
        merged[key] = _merged(old, value) if isinstance(old, Mapping) and isinstance(value, Mapping) else value
    return merged


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
        DeployConfigError: adapter extras try to set a placement key or the memory share,
            LoRA is asked for on a policy stage vLLM-Omni serves no LoRA on, chunks would
            stream into a policy stage fed by another, or vLLM-Omni's deploy file for the
            mode is missing.
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
    upstream = upstream_deploy(upstream_file) if upstream_file else None
    bases = {stage.stage_id: upstream.stage(stage.stage_id) if upstream else {} for stage in stages}
    weights = {sid: float(base.get("gpu_memory_utilization") or VLLM_DEFAULT_GPU_MEMORY_UTILIZATION)
               for sid, base in bases.items()}
    shares = stage_memory_shares(list(placements.values()), weights, options.gpu_memory_utilization)

    stage_entries = []
    for stage in stages:
        sid = stage.stage_id
        placement = placements[sid]
        base = bases[sid]
        dropped = OWNED_KEYS | set(PIPELINE_WIDE_KEYS) | ({"default_sampling_params"} if sid == policy_id else set())
        entry: dict[str, Any] = {
            "stage_id": sid,
            "devices": placement.devices_str,
            "tensor_parallel_size": placement.tensor_parallel_size,
            **{key: value for key, value in base.items() if key not in dropped},
            "gpu_memory_utilization": shares[sid],
            "enable_sleep_mode": options.enable_sleep_mode,
        }
        if sid == policy_id:
            entry = _merged(entry, _policy_stage_args(options, base))
        elif options.all_stages_eager:
            entry["enforce_eager"] = True
        if hf_overrides:
            entry = _merged(entry, {"hf_overrides": dict(hf_overrides)})
        extras = adapter.get_stage_engine_extras(sid, mode)
        clashing = sorted(OWNED_KEYS & set(extras))
        if clashing:
            raise DeployConfigError(
                f"{type(adapter).__name__}.get_stage_engine_extras({sid}, {mode!r}) sets {clashing}, which "
                "the replica layout and the memory split own; drop them from the extras and set "
                "tensor_parallel_size / gpus_per_replica / gpu_memory_utilization on the rollout config instead."
            )
        entry.update(extras)
        stage_entries.append(entry)

    config: dict[str, Any] = {
        "pipeline": adapter.get_pipeline_id(mode),
        "async_chunk": options.async_chunk,
        "dtype": options.dtype,
        "trust_remote_code": options.trust_remote_code,
        "enable_prefix_caching": options.enable_prefix_caching,
        "stages": stage_entries,
    }
    named = {ref for entry in stage_entries for key in ("input_connectors", "output_connectors")
             for ref in (entry.get(key) or {}).values() if isinstance(ref, str)}
    if upstream and named:
        config["connectors"] = {name: upstream.connectors[name] for name in sorted(named)
                                if name in upstream.connectors}
    return config


def render_deploy_config(config: dict[str, Any]) -> str:
    """Deterministic text for a deploy config (JSON, valid YAML); used for golden files."""
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def write_deploy_config(config: dict[str, Any], path: str | Path) -> Path:
    """Write ``config`` where vLLM-Omni's ``deploy_config=`` argument can read it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_deploy_config(config))
    return target
