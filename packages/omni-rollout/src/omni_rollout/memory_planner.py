"""Size a colocated vLLM-Omni rollout: ``python -m omni_rollout.memory_planner --help``.

In colocated training the rollout engine sleeps while the actor trains and re-maps its
memory (weights, then KV cache) every step, on the same GPUs. Two kinds of memory matter
and different knobs control them (see the seeds' "Sizing rollout memory in colocated
sleep mode"):

- the engine's **budgeted pool**, ``gpu_memory_utilization x total``: the weights and a
  KV cache that fills the rest. A full KV pool preempts requests; it never OOMs.
- **unbudgeted transients** on top of it: CUDA-graph capture pools, bounded by the
  largest entry of ``cudagraph_capture_sizes``, and the in-flight multimodal envelope
  (encoder outputs kept for every admitted request), bounded by ``max_num_seqs``.

Estimation model (every quantity per GPU, GiB = 2**30 bytes):

    weights      = params x weight_bytes / tp
    kv_per_token = 2 (K and V) x layers x ceil(kv_heads / tp) x head_dim x kv_bytes
    kv_pool      = u x s x total - weights                  (u = gpu_memory_utilization,
                   s = policy_share: the policy stage's part of u when other pipeline stages
                   share its GPU; the deploy config splits u over them, see
                   ``omni_rollout.vllm_omni.deploy_config.stage_memory_shares``; 1 when alone)
    graph_pool   = max(cudagraph_capture_sizes) x graph_mib_per_seq
    envelope     = max_num_seqs x sum_m(fraction_m x encoder_mib_m)   (m = audio/image/video)
    headroom     = reserved + remap_margin x total + graph_pool + envelope
                   (reserved: CUDA context, NCCL, actor residue; remap_margin: slack the
                   wake-up re-map needs after training fragmented memory)

Recommendation, in this order:

1. ``max_num_seqs``: the largest power of two <= ``max_num_seqs_cap`` whose envelope fits
   ``envelope_budget x total``. Capping concurrency only bites encoder-heavy workloads;
   text/image ones keep the cap.
2. ``cudagraph_capture_sizes``: powers of two up to ``min(max_num_seqs, 512)``; vLLM's
   default would capture up to ``min(2 x max_num_seqs, 512)``, a graph pool for batch
   sizes the scheduler can never reach.
3. ``gpu_memory_utilization``: the largest multiple of 0.05 (at most 0.9) that leaves the
   headroom free: ``u = floor20((total - headroom) / total)``.

Then the KV pool is checked: it must be positive (else the weights do not fit: raise TP),
and if it holds fewer than ``max_num_seqs`` full sequences (prompt + response) the
workload is KV-bound: it will preempt, which the seeds call cheap next to starving
decode, so concurrency stays and the report says so.

The per-request encoder sizes, ``graph_mib_per_seq``, ``remap_margin`` and
``envelope_budget`` defaults are assumptions, not measurements: they are calibrated so
the seeds' GPU recipes come out (text, the base recipe: 0.8; audio+image: 0.7 / 256 /
[1..256]). Replace them with numbers measured on your GPU when you have them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 2**30
MIB = 2**20
MAX_UTILIZATION = 0.9
VLLM_MAX_CAPTURE = 512
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8": 1, "fp8": 1}


class PlannerError(ValueError):
    """The inputs describe a setup that cannot work, or are incomplete."""


@dataclass(frozen=True)
class ModelShape:
    """The numbers of the rolled-out model that size its memory."""

    params: float
    layers: int
    kv_heads: int
    head_dim: int
    weight_bytes: int = 2
    kv_bytes: int = 2


@dataclass(frozen=True)
class Workload:
    """GPU, parallelism, token budgets and modality mix of one rollout replica.

    ``*_fraction`` is the share of requests carrying that modality (independent: an
    audio+image request counts in both); ``*_mib`` is what one such request keeps in
    flight (encoder outputs plus processed inputs). ``policy_share`` is the policy stage's
    part of the replica's ``gpu_memory_utilization`` when other stages share its GPU.
    """

    gpu_gib: float
    prompt_length: int
    response_length: int
    tensor_parallel_size: int = 1
    audio_fraction: float = 0.0
    image_fraction: float = 0.0
    video_fraction: float = 0.0
    audio_mib: float = 38.0
    image_mib: float = 2.0
    video_mib: float = 64.0
    reserved_gib: float = 4.0
    remap_margin: float = 0.10
    graph_mib_per_seq: float = 2.0
    envelope_budget: float = 0.15
    max_num_seqs_cap: int = 1024
    policy_share: float = 1.0

    def __post_init__(self) -> None:
        errors = []
        if not 0.0 < self.policy_share <= 1.0:
            errors.append(f"policy_share must be in (0, 1], got {self.policy_share}")
        for name in ("gpu_gib", "prompt_length", "response_length", "tensor_parallel_size"):
            if getattr(self, name) <= 0:
                errors.append(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("audio_fraction", "image_fraction", "video_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                errors.append(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.max_num_seqs_cap < 1:
            errors.append(f"max_num_seqs_cap must be >= 1, got {self.max_num_seqs_cap}")
        if errors:
            raise PlannerError("Invalid workload: " + "; ".join(errors) + ".")

    def encoder_mib_per_request(self) -> float:
        """Expected in-flight multimodal MiB per admitted request."""
        return (
            self.audio_fraction * self.audio_mib
            + self.image_fraction * self.image_mib
            + self.video_fraction * self.video_mib
        )


@dataclass(frozen=True)
class Plan:
    """Per-GPU footprint (GiB) and the recommended engine knobs."""

    weights_gib: float
    kv_bytes_per_token: int
    kv_pool_gib: float
    kv_capacity_tokens: int
    kv_capacity_seqs: int
    graph_pool_gib: float
    envelope_gib: float
    headroom_gib: float
    gpu_memory_utilization: float
    max_num_seqs: int
    cudagraph_capture_sizes: tuple[int, ...]
    kv_bound: bool
    reasons: tuple[str, ...]


def kv_bytes_per_token(model: ModelShape, tp: int) -> int:
    """K and V of one token on one GPU; KV heads split over TP (replicated below 1)."""
    heads_per_gpu = math.ceil(model.kv_heads / tp)
    return 2 * model.layers * heads_per_gpu * model.head_dim * model.kv_bytes


def capture_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """Powers of two up to ``min(max_num_seqs, 512)``, plus that bound if not one."""
    top = min(max_num_seqs, VLLM_MAX_CAPTURE)
    sizes = [1 << i for i in range(top.bit_length()) if (1 << i) <= top]
    if sizes[-1] != top:
        sizes.append(top)
    return tuple(sizes)


def _floor_to_step(value: float, step: float = 0.05) -> float:
    # round() first so 0.8 / 0.05 = 15.999... counts as 16 steps.
    return round(math.floor(round(value / step, 9)) * step, 2)


def plan(model: ModelShape, work: Workload) -> Plan:
    """Apply the estimation model of the module docstring.

    Raises:
        PlannerError: the weights do not fit in the pool the headroom leaves.
    """
    tp = work.tensor_parallel_size
    total = work.gpu_gib
    reasons = []

    per_request = work.encoder_mib_per_request()
    budget_mib = work.envelope_budget * total * 1024
    seqs = 1 << (work.max_num_seqs_cap.bit_length() - 1)
    while seqs > 1 and seqs * per_request > budget_mib:
        seqs //= 2
    if seqs < work.max_num_seqs_cap and per_request > 0:
        reasons.append(
            f"max_num_seqs {seqs}: each request keeps ~{per_request:.1f} MiB of encoder "
            f"outputs in flight; {seqs * 2} requests would hold "
            f"{seqs * 2 * per_request / 1024:.1f} GiB, over the {budget_mib / 1024:.1f} GiB "
            f"envelope budget ({work.envelope_budget:.0%} of {total:g} GiB). The envelope is "
            "bounded by max_num_seqs, not by gpu_memory_utilization."
        )
    else:
        reasons.append(
            f"max_num_seqs {seqs}: the encoder envelope ({seqs * per_request / 1024:.2f} GiB) "
            "fits its budget, so concurrency stays at the cap."
        )

    sizes = capture_sizes(seqs)
    graph_gib = sizes[-1] * work.graph_mib_per_seq / 1024
    envelope_gib = seqs * per_request / 1024
    vllm_default = min(2 * seqs, VLLM_MAX_CAPTURE)
    if vllm_default > sizes[-1]:
        why = (
            f"a decode batch never exceeds max_num_seqs, yet vLLM's default would capture "
            f"up to {vllm_default} and pool memory for sizes never replayed"
        )
    else:
        why = f"vLLM captures at most {VLLM_MAX_CAPTURE} anyway"
    reasons.append(
        f"cudagraph_capture_sizes up to {sizes[-1]}: {why}; pool ~{graph_gib:.2f} GiB."
    )

    headroom = work.reserved_gib + work.remap_margin * total + graph_gib + envelope_gib
    utilization = min(MAX_UTILIZATION, _floor_to_step((total - headroom) / total))
    reasons.append(
        f"gpu_memory_utilization {utilization:.2f}: outside the pool go {work.reserved_gib:g} "
        f"GiB reserved + {work.remap_margin * total:.1f} GiB wake-up remap margin + "
        f"{graph_gib:.2f} GiB graphs + {envelope_gib:.2f} GiB encoder envelope = "
        f"{headroom:.2f} GiB; (total - headroom) / total = {(total - headroom) / total:.3f}, "
        "rounded down to a multiple of 0.05."
    )

    weights = model.params * model.weight_bytes / tp / GIB
    kv_pool = utilization * work.policy_share * total - weights
    if kv_pool <= 0:
        raise PlannerError(
            f"The weights need {weights:.1f} GiB per GPU but the pool is only "
            f"{utilization * work.policy_share * total:.1f} GiB (utilization {utilization:.2f} x policy share "
            f"{work.policy_share:g} of {total:g} GiB); "
            "raise tensor_parallel_size, use a GPU with more memory, or cut the transients "
            "(smaller max_num_seqs_cap)."
        )
    per_token = kv_bytes_per_token(model, tp)
    capacity_tokens = int(kv_pool * GIB // per_token)
    capacity_seqs = capacity_tokens // (work.prompt_length + work.response_length)
    kv_bound = capacity_seqs < seqs
    if kv_bound:
        reasons.append(
            f"KV-bound: the {kv_pool:.1f} GiB pool holds {capacity_seqs} full sequences of "
            f"{work.prompt_length + work.response_length} tokens, fewer than max_num_seqs; "
            "the scheduler will preempt, which is cheap next to starving decode, so "
            "concurrency stays. Raise gpu_memory_utilization only if the headroom allows."
        )
    else:
        reasons.append(
            f"KV pool {kv_pool:.1f} GiB holds {capacity_seqs} full sequences, enough for "
            f"max_num_seqs {seqs}."
        )
    return Plan(
        weights_gib=weights,
        kv_bytes_per_token=per_token,
        kv_pool_gib=kv_pool,
        kv_capacity_tokens=capacity_tokens,
        kv_capacity_seqs=capacity_seqs,
        graph_pool_gib=graph_gib,
        envelope_gib=envelope_gib,
        headroom_gib=headroom,
        gpu_memory_utilization=utilization,
        max_num_seqs=seqs,
        cudagraph_capture_sizes=sizes,
        kv_bound=kv_bound,
        reasons=tuple(reasons),
    )


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language-model part of an HF config (Qwen3-Omni nests it in the thinker)."""
    for path in (("thinker_config", "text_config"), ("text_config",), ()):
        node: Any = config
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping) and "num_hidden_layers" in node:
            return node
    raise PlannerError(
        "No num_hidden_layers in the config (looked at thinker_config.text_config, "
        "text_config and the top level); pass --layers/--kv-heads/--head-dim instead."
    )


def model_shape_from_config(path: str | Path, params: float) -> ModelShape:
    """Read layers, KV heads, head dim and dtype from an HF ``config.json``."""
    return model_shape_from_mapping(json.loads(Path(path).read_text()), params, source=str(path))


def model_shape_from_mapping(config: Mapping[str, Any], params: float, source: str = "config") -> ModelShape:
    """:func:`model_shape_from_config` for a config already read (``PretrainedConfig.to_dict()``);
    ``source`` names it in errors."""
    text = _text_config(config)
    heads = text.get("num_attention_heads")
    head_dim = text.get("head_dim") or (text["hidden_size"] // heads if heads else None)
    if head_dim is None:
        raise PlannerError(f"{source}: cannot work out head_dim; pass --head-dim.")
    kv_heads = text.get("num_key_value_heads") or heads
    if kv_heads is None:
        raise PlannerError(f"{source}: no num_key_value_heads or num_attention_heads; pass --kv-heads.")
    dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "bfloat16")
    if dtype not in DTYPE_BYTES:
        raise PlannerError(
            f"{source}: unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}. "
            "Pass --layers/--kv-heads/--head-dim/--dtype-bytes instead of --config."
        )
    size = DTYPE_BYTES[dtype]
    return ModelShape(
        params=params,
        layers=int(text["num_hidden_layers"]),
        kv_heads=int(kv_heads),
        head_dim=int(head_dim),
        weight_bytes=size,
        kv_bytes=size,
    )


def format_plan(result: Plan) -> str:
    """The report printed by the command."""
    rows = [
        ("weights", result.weights_gib, "budgeted (inside the pool)"),
        ("KV pool", result.kv_pool_gib, f"budgeted; {result.kv_capacity_tokens} tokens"),
        ("CUDA-graph pools", result.graph_pool_gib, "unbudgeted"),
        ("encoder envelope", result.envelope_gib, "unbudgeted"),
        ("headroom needed", result.headroom_gib, "outside the pool"),
    ]
    lines = ["Per-GPU footprint (GiB):"]
    lines += [f"  {name:<18}{gib:>8.2f}  {note}" for name, gib, note in rows]
    lines += [
        "",
        "Recommended:",
        f"  gpu_memory_utilization={result.gpu_memory_utilization:.2f}",
        f"  max_num_seqs={result.max_num_seqs}",
        f"  cudagraph_capture_sizes=[{','.join(map(str, result.cudagraph_capture_sizes))}]",
        "",
        "Why:",
    ]
    lines += [f"  - {reason}" for reason in result.reasons]
    return "\n".join(lines)


WORKLOAD_FLAGS = {
    "reserved_gib": "GiB outside the pool: CUDA context, NCCL buffers, the sleeping actor's residue",
    "remap_margin": "share of the GPU kept free for the wake-up re-map after training",
    "graph_mib_per_seq": "CUDA-graph pool MiB per captured sequence (largest capture size)",
    "envelope_budget": "share of the GPU the in-flight encoder outputs may take",
    "max_num_seqs_cap": "the highest max_num_seqs to consider",
    "policy_share": "the policy stage's part of gpu_memory_utilization when other pipeline stages share "
                    "its GPU (the deploy config's split, e.g. a Qwen3-Omni talker beside thinker and code2wav "
                    "on one GPU: 0.6 / (0.9 + 0.6 + 0.1) = 0.375)",
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m omni_rollout.memory_planner",
        description="Estimate a colocated vLLM-Omni rollout's per-GPU memory and recommend "
        "gpu_memory_utilization, max_num_seqs and cudagraph_capture_sizes.",
    )
    p.add_argument("--params", type=float, required=True,
                   help="parameters the engine loads, e.g. 31.7e9")
    p.add_argument("--config", help="HF config.json to read layers, KV heads, head dim, dtype from")
    p.add_argument("--layers", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--head-dim", type=int)
    p.add_argument("--dtype-bytes", type=int, default=2, help="bytes per weight and KV value")
    p.add_argument("--gpu-gib", type=float, required=True, help="memory of one GPU, GiB")
    p.add_argument("--tp", type=int, default=1, help="tensor parallel size of the rollout")
    p.add_argument("--prompt-length", type=int, required=True)
    p.add_argument("--response-length", type=int, required=True)
    defaults = Workload(gpu_gib=1, prompt_length=1, response_length=1)
    for name in ("audio", "image", "video"):
        p.add_argument(f"--{name}-fraction", type=float, default=0.0,
                       help=f"share of requests carrying {name}")
        p.add_argument(f"--{name}-mib", type=float, default=getattr(defaults, f"{name}_mib"),
                       help=f"in-flight MiB per {name} request (default: calibrated assumption)")
    for field_name, help_text in WORKLOAD_FLAGS.items():
        default = getattr(defaults, field_name)
        p.add_argument(f"--{field_name.replace('_', '-')}", type=type(default), default=default,
                       help=f"{help_text} (default {default})")
    return p


def _model_from_args(args: argparse.Namespace) -> ModelShape:
    if args.config:
        return model_shape_from_config(args.config, args.params)
    given = {"--layers": args.layers, "--kv-heads": args.kv_heads, "--head-dim": args.head_dim}
    missing = [flag for flag, value in given.items() if value is None]
    if missing:
        raise PlannerError(
            f"Pass --config, or all of --layers/--kv-heads/--head-dim (missing {missing})."
        )
    return ModelShape(args.params, args.layers, args.kv_heads, args.head_dim,
                      args.dtype_bytes, args.dtype_bytes)


def _workload_from_args(args: argparse.Namespace) -> Workload:
    mix = {f"{m}_{k}": getattr(args, f"{m}_{k}")
           for m in ("audio", "image", "video") for k in ("fraction", "mib")}
    tuning = {name: getattr(args, name) for name in WORKLOAD_FLAGS}
    return Workload(gpu_gib=args.gpu_gib, prompt_length=args.prompt_length,
                    response_length=args.response_length, tensor_parallel_size=args.tp,
                    **mix, **tuning)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, plan, print; 0 on success, 2 on inputs that cannot work."""
    args = _parser().parse_args(argv)
    try:
        print(format_plan(plan(_model_from_args(args), _workload_from_args(args))))
    except PlannerError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
