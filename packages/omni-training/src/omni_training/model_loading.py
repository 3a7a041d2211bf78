"""Build the trainable policy from a checkpoint through its training adapter.

Order (the contract's): register auto classes -> load (the adapter's ``policy_class`` when
it names one, else an auto class; onto the run's device, in the dtype :func:`precision`
picks) -> ``configure_model`` (strip, freeze) -> gradient checkpointing -> LoRA injection.
FSDP wrapping, when an engine does it, comes after (verl's FSDP engine keeps the same order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

from omni_contracts import TrainingAdapter
from omni_training.memory_plan import ParamCounts
from omni_training.settings import LoraSettings

DEFAULT_AUTO_CLASS = "AutoModelForMultimodalLM"
FALLBACK_AUTO_CLASS = "AutoModelForCausalLM"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Precision:
    """The dtype the policy's weights are stored in, and the one its forward computes in."""

    weights: str  # the dtype the checkpoint loads in
    compute: str  # ``actor.dtype``

    @property
    def autocast(self) -> torch.dtype | None:
        """What the forward autocasts to: the compute dtype where the weights are wider."""
        return None if self.compute == self.weights else DTYPES[self.compute]


def precision(dtype: str, *, lora: bool) -> Precision:
    """The precision of a policy whose ``actor.dtype`` is ``dtype``: trained weights and their
    AdamW state are always float32.

    With LoRA the frozen base loads in ``dtype``; PEFT creates the adapter in float32 on a
    bf16 base (``autocast_adapter_dtype``), and its gradients and AdamW moments follow. A full
    fine-tune trains every weight, so the model loads in float32 (master weights) and the
    forward autocasts to ``dtype``, as verl's FSDP engine keeps fp32 parameters and computes
    in bf16. AdamW on bf16 weights would drop every step under half a bf16 ulp: a 3e-6 step
    on a weight of 0.01 (ulp 2**-14 = 6.1e-5) rounds back to 0.01, and the run does not learn.
    """
    if dtype not in DTYPES:
        raise ValueError(f"Unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}.")
    return Precision(weights=dtype if lora else "float32", compute=dtype)


def load_policy(
    model_path: str,
    adapter: TrainingAdapter,
    lora: LoraSettings,
    *,
    dtype: str = "float32",
    device: str = "cpu",
    gradient_checkpointing: bool = False,
    frozen: bool = False,
) -> tuple[Any, Any]:
    """``(model, model_config)``: the configured model on ``device``, LoRA-wrapped when
    ``lora.rank > 0``; with ``gradient_checkpointing`` its decoder layers recompute their
    forward in the backward pass instead of keeping their activations. ``dtype`` is the
    compute dtype: a trained policy's weights load in ``precision(dtype, lora=...).weights``;
    a ``frozen`` model's (a distillation teacher's) in ``dtype``."""
    import transformers

    adapter.register_auto_classes()
    config = transformers.AutoConfig.from_pretrained(model_path)
    weights = dtype if frozen else precision(dtype, lora=lora.rank > 0).weights
    model = _from_pretrained(model_path, adapter, config, weights, device)
    adapter.configure_model(model, config)
    if gradient_checkpointing:
        enable_gradient_checkpointing(model, lora=lora.rank > 0)
    if lora.rank > 0:
        model = apply_lora(model, adapter, lora)
    return model, config


def enable_gradient_checkpointing(model: Any, *, lora: bool) -> None:
    """transformers' checkpointing, non-reentrant (as verl's FSDP engine sets it), on every
    submodule that supports it. With LoRA the embeddings are frozen; a hook makes their
    output require grad, so the checkpointed layers see a graph (transformers adds it itself
    for a model whose main input is ``input_ids``; verl does the same).

    Raises:
        ValueError: the model does not support gradient checkpointing (says how to turn it off).
    """
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(
            f"{type(model).__name__} does not support gradient checkpointing; set "
            "actor_rollout_ref.model.enable_gradient_checkpointing=false."
        )
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora and getattr(model, "main_input_name", None) != "input_ids":
        model.enable_input_require_grads()


def _from_pretrained(model_path: str, adapter: TrainingAdapter, config: Any, dtype: str, device: str = "cpu") -> Any:
    """Load with the adapter's ``policy_class``; without one, through its
    ``auto_model_class`` or :data:`DEFAULT_AUTO_CLASS`, falling back to
    ``AutoModelForCausalLM`` for a text-only causal LM the multimodal auto class does not own.

    Raises:
        ValueError: no auto class owns the checkpoint's config class (names the adapter
            attribute that fixes it).
    """
    import transformers

    # On a GPU the weights load straight onto it (no full copy in host memory first).
    placement: dict[str, Any] = {} if device == "cpu" else {"device_map": {"": device}}
    policy_class = adapter.policy_class(config)
    if policy_class is not None:
        return policy_class.from_pretrained(model_path, dtype=DTYPES[dtype], **placement)
    names = _auto_class_names(adapter)
    for name in names:
        try:
            return getattr(transformers, name).from_pretrained(model_path, dtype=DTYPES[dtype], **placement)
        except ValueError as exc:
            if "Unrecognized configuration class" not in str(exc):
                raise
    raise _no_auto_class(names, adapter, config, f"the checkpoint at {model_path}")


def _auto_class_names(adapter: TrainingAdapter) -> list[str]:
    return [adapter.auto_model_class] if adapter.auto_model_class else [DEFAULT_AUTO_CLASS, FALLBACK_AUTO_CLASS]


def _no_auto_class(names: list[str], adapter: TrainingAdapter, config: Any, source: str) -> ValueError:
    return ValueError(
        f"No transformers auto class among {', '.join(names)} loads {type(config).__name__} "
        f"({source}). Set `auto_model_class` on {type(adapter).__name__} "
        "to the auto class that owns this architecture (e.g. 'AutoModelForImageTextToText')."
    )


def count_parameters(config: Any, adapter: TrainingAdapter, lora: LoraSettings) -> ParamCounts:
    """The parameters of the model ``config`` (a checkpoint's transformers config)
    describes, as :func:`load_policy` builds it (after the adapter's stripping and
    freezing), counted on the meta device: nothing is loaded or allocated. ``lora`` is the
    LoRA the run would inject: its count uses PEFT's matching rules (a target is a
    module-name suffix, or a regex when a string; the exclude regex matches the whole name)."""
    import transformers

    adapter.register_auto_classes()
    model = None
    names = _auto_class_names(adapter)
    policy_class = adapter.policy_class(config)
    if policy_class is not None:
        with torch.device("meta"):
            model = policy_class._from_config(config)
        names = []
    for name in names:
        try:
            with torch.device("meta"):
                model = getattr(transformers, name).from_config(config)
            break
        except ValueError as exc:
            if "Unrecognized configuration class" not in str(exc):
                raise
    if model is None:
        raise _no_auto_class(names, adapter, config, "counting its parameters")
    adapter.configure_model(model, config)
    named = [(name.split("."), parameter.numel()) for name, parameter in model.named_parameters()]
    # Groups one level below the prefix all names share (``thinker.`` of an Omni model).
    shared = 0
    while len({tuple(path[: shared + 1]) for path, _ in named}) == 1 and shared + 1 < min(len(p) for p, _ in named):
        shared += 1
    parts: dict[str, int] = {}
    for path, numel in named:
        parts[path[shared]] = parts.get(path[shared], 0) + numel
    total = sum(parts.values())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return ParamCounts(total, trainable, lora_parameter_count(model, adapter, lora),
                       tuple(sorted(parts.items(), key=lambda item: -item[1])))


def lora_parameter_count(model: Any, adapter: TrainingAdapter, lora: LoraSettings) -> int:
    """``rank x (in + out)`` over the ``nn.Linear`` modules LoRA would wrap, and ``rank x experts
    x (in + out)`` over the 3-D expert parameters ``target_parameters`` names (0 at rank 0)."""
    if lora.rank <= 0:
        return 0
    targets = lora.target_modules or adapter.lora_target_modules
    exclude = lora.exclude_modules or adapter.lora_exclude_modules
    count = 0
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        if isinstance(targets, str):
            targeted = re.fullmatch(targets, name) is not None
        else:
            targeted = any(name == t or name.endswith("." + t) for t in targets or ())
        excluded = isinstance(exclude, str) and re.fullmatch(exclude, name) is not None
        if targeted and not excluded:
            count += lora.rank * (module.in_features + module.out_features)
    for name, parameter in model.named_parameters():  # PEFT's target_parameters: [E, out, in] experts
        owner, _, leaf = name.rpartition(".")
        if leaf in (lora.target_parameters or ()) and parameter.dim() == 3 and not (
            isinstance(exclude, str) and re.fullmatch(exclude, owner) is not None
        ):
            experts, out_features, in_features = parameter.shape
            count += lora.rank * experts * (in_features + out_features)
    return count


def apply_lora(model: Any, adapter: TrainingAdapter, lora: LoraSettings) -> Any:
    """Wrap ``model`` with PEFT LoRA; targets default to the adapter's.

    Raises:
        ValueError: neither the settings nor the adapter name target modules.
    """
    import peft

    targets = lora.target_modules or adapter.lora_target_modules
    if not targets:
        raise ValueError(
            f"LoRA rank {lora.rank} needs target modules: set actor_rollout_ref.model.target_modules "
            f"or give {type(adapter).__name__} a lora_target_modules default."
        )
    config = peft.LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(targets) if not isinstance(targets, str) else targets,
        exclude_modules=lora.exclude_modules or adapter.lora_exclude_modules,
        target_parameters=list(lora.target_parameters) if lora.target_parameters else None,
    )
    # The adapter in float32 on a bf16 base (PEFT's default, stated: AdamW steps on bf16
    # adapter weights would round to nothing; see precision()).
    return peft.get_peft_model(model, config, autocast_adapter_dtype=True)
