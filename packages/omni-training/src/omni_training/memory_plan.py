"""What a local-engine run needs on one GPU: weights, gradients, optimizer state, update
activations and logits, rollout KV cache and prefill logits, for LoRA and full fine-tuning,
with and without gradient checkpointing.

Pure arithmetic over numbers read from a checkpoint's config (:meth:`TextShape.from_config`)
and parameter counts (``omni_training.model_loading.count_parameters`` counts them on the
meta device). An estimate: weights are exact, activations count the tensors autograd saves
per token and layer (attention and the MLP or eager MoE block); LoRA's rank-sized tensors,
the allocator's fragmentation and the CUDA context (~1-3 GB) are left out.

Rollout and update do not overlap (the KV cache is freed before the update), so the peak
is the resident state (weights, gradients, optimizer state) plus the larger phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GB = 1e9
USABLE_FRACTION = 0.92  # of a GPU's memory: the CUDA context and fragmentation take the rest

PLAN_NOTES = (
    "  estimate: weights exact (from the config); activations counted per layer for the saved tensors "
    "of attention and the MLP/MoE block (eager experts), LoRA's rank-sized tensors left out; the allocator's "
    "fragmentation and the CUDA context (~1-3 GB) come on top. The rollout's sampler keeps one step's "
    "distribution, not every step's scores."
)


@dataclass(frozen=True)
class TextShape:
    """The text decoder's sizes that memory depends on."""

    hidden_size: int
    num_layers: int
    vocab_size: int
    q_dim: int  # attention heads x head dim
    kv_dim: int  # key/value heads x head dim
    mlp_width: int  # a dense MLP's intermediate size, or one expert's
    num_experts: int = 0  # 0: a dense MLP
    experts_per_token: int = 0

    @classmethod
    def from_config(cls, config: Any) -> TextShape:
        """From a transformers config: the text config of a multimodal one (``thinker_config``,
        ``text_config``), else the config itself.

        Raises:
            ValueError: the config lacks a size this plan needs.
        """
        text = config
        for name in ("thinker_config", "text_config"):
            text = getattr(text, name, None) or text
        try:
            heads, hidden = int(text.num_attention_heads), int(text.hidden_size)
            head_dim = int(getattr(text, "head_dim", None) or hidden // heads)
            experts = int(getattr(text, "num_experts", 0) or 0)
            width = text.moe_intermediate_size if experts else text.intermediate_size
            return cls(
                hidden_size=hidden, num_layers=int(text.num_hidden_layers), vocab_size=int(text.vocab_size),
                q_dim=heads * head_dim,
                kv_dim=int(getattr(text, "num_key_value_heads", None) or heads) * head_dim,
                mlp_width=int(width), num_experts=experts,
                experts_per_token=int(getattr(text, "num_experts_per_tok", 0) or 0) if experts else 0,
            )
        except AttributeError as exc:
            raise ValueError(f"{type(text).__name__} lacks a size the memory plan needs: {exc}") from exc

    def saved_per_token_layer(self) -> int:
        """Elements autograd saves per token and decoder layer (bf16 unless noted).

        Attention: norm out, q, k, v, q and k after norm and rope, attention out, o_proj out
        = ``2h + 3q + 3kv``. Dense MLP: norm out, gate, up, act, act*up, down out
        = ``2h + 4w``. MoE: norm out, router logits (fp32: 2 elements each), per selected
        expert its input copy, gate, up, act, act*up and down out, then the combine
        = ``2h + 2E + k(2h + 4w)``.
        """
        h, w = self.hidden_size, self.mlp_width
        attention = 2 * h + 3 * self.q_dim + 3 * self.kv_dim
        if self.num_experts:
            mlp = 2 * h + 2 * self.num_experts + self.experts_per_token * (2 * h + 4 * w)
        else:
            mlp = 2 * h + 4 * w
        return attention + mlp


@dataclass(frozen=True)
class ParamCounts:
    """Parameters of the model as trained (after the adapter's stripping)."""

    total: int
    trainable_full: int  # full fine-tuning: what stays unfrozen (encoders are frozen by default)
    lora: int  # LoRA parameters at the run's rank and targets
    parts: tuple[tuple[str, int], ...] = ()  # top-level groups, for the printout


@dataclass(frozen=True)
class Workload:
    prompts: int  # per step, in one rollout call
    n: int  # samples per prompt
    prompt_tokens: int
    response_tokens: int
    micro_batch: int  # training rows per forward/backward
    lora_rank: int


@dataclass(frozen=True)
class Column:
    name: str
    lora: bool
    checkpointing: bool


COLUMNS = (Column("LoRA", True, False), Column("LoRA + ckpt", True, True), Column("full FT", False, False),
           Column("full FT + ckpt", False, True))


def memory_plan(counts: ParamCounts, text: TextShape, work: Workload, *, lora: bool, checkpointing: bool) -> dict[str, float]:
    """Bytes per item on one GPU computing in bf16; ``"peak"`` = resident + the larger phase."""
    h, layers, vocab = text.hidden_size, text.num_layers, text.vocab_size
    trainable = counts.lora if lora else counts.trainable_full
    # LoRA: a bf16 base; PEFT keeps the adapter in fp32 on it (autocast_adapter_dtype), and its
    # grads and AdamW moments follow. Full fine-tuning: the model loads in fp32 (master weights,
    # the forward autocasts to bf16: model_loading.precision), grads and moments in fp32.
    weight_bytes = 2 if lora else 4
    state_bytes = 4
    rows = work.prompts * work.n
    seq = work.prompt_tokens + work.response_tokens
    tokens = work.micro_batch * seq
    layer_bytes = 2 * text.saved_per_token_layer()
    # Checkpointing keeps each layer's input (bf16) and recomputes one layer at a time.
    saved = tokens * layers * 2 * h + tokens * layer_bytes if checkpointing else tokens * layers * layer_bytes
    # The positions that predict the response (T + 1: logits_to_keep) are projected onto the
    # vocabulary (bf16 logits), then fp32 scores, log-softmax and entropy over the T.
    logits = work.micro_batch * (work.response_tokens + 1) * vocab * 2 + work.micro_batch * work.response_tokens * vocab * 4 * 3
    kv = rows * seq * 2 * layers * text.kv_dim * 2  # k and v, bf16
    prefill_logits = rows * vocab * 2  # the local engine projects the last position only
    plan = {
        "weights (LoRA bf16, full FT fp32)": counts.total * float(weight_bytes),
        "trainable weights (extra, LoRA fp32)": trainable * 4.0 if lora else 0.0,
        "gradients": trainable * float(state_bytes),
        "AdamW moments": trainable * 2.0 * state_bytes,
        "update: activations": float(saved),
        "update: logits": float(logits),
        "rollout: KV cache": float(kv),
        "rollout: prefill logits": float(prefill_logits),
    }
    resident = sum(v for k, v in plan.items() if not k.startswith(("update", "rollout")))
    update = plan["update: activations"] + plan["update: logits"]
    rollout = plan["rollout: KV cache"] + plan["rollout: prefill logits"]
    plan["peak"] = resident + max(update, rollout)
    return plan


def count_text(count: int) -> str:
    """``31.72B``, ``13.4M``, ``52.3K``."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{count / size:.{2 if unit == 'B' else 1}f}{unit}"
    return str(count)


def fits(peak: float, gpu_bytes: float) -> bool:
    return peak <= gpu_bytes * USABLE_FRACTION


def format_plan(
    title: str, counts: ParamCounts, text: TextShape, work: Workload, gpu_bytes: float | None,
    *, chosen: Column | None = None,
) -> str:
    """The four columns side by side (GB); ``gpu_bytes=None``: no verdict line; ``chosen``
    marks the run's own column with ``*``."""
    plans = [memory_plan(counts, text, work, lora=c.lora, checkpointing=c.checkpointing) for c in COLUMNS]
    parts = ", ".join(f"{name} {count_text(count)}" for name, count in counts.parts)
    names = [f"{'*' if c == chosen else ''}{c.name}" for c in COLUMNS]
    lines = [
        title,
        f"  params {count_text(counts.total)}{f' ({parts})' if parts else ''}; trainable: LoRA r={work.lora_rank} "
        f"{count_text(counts.lora)}, full FT {count_text(counts.trainable_full)}",
        f"  workload: {work.prompts} prompts x n={work.n} = {work.prompts * work.n} rollout rows of "
        f"{work.prompt_tokens} prompt + {work.response_tokens} response tokens; update micro-batch {work.micro_batch} rows",
        f"  {'GB':<38}" + "".join(f"{name:>16}" for name in names),
    ]
    for key in plans[0]:
        lines.append(f"  {key:<38}" + "".join(f"{plan[key] / GB:>16.1f}" for plan in plans))
    if gpu_bytes is not None:
        verdicts = ["fits" if fits(plan["peak"], gpu_bytes) else "does not fit" for plan in plans]
        label = f"on {gpu_bytes / GB:.0f} GB ({USABLE_FRACTION:.0%} usable)"
        lines.append(f"  {label:<38}" + "".join(f"{v:>16}" for v in verdicts))
    return "\n".join(lines)
