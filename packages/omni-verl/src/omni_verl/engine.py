"""Our training adapter inside verl's FSDP engine, registered with ``EngineRegistry``.

verl's FSDP engine builds the actor (and the reference model) as: HF load -> drop
``_verl_strip_modules`` -> monkey patches -> dtype -> gradient checkpointing
(``_build_module``), then LoRA (``_build_lora_module``), then FSDP wrapping by
``_no_split_modules`` (``_build_fsdp_module``), then the optimizer. This engine runs the
adapter in that sequence: ``register_auto_classes`` before the load, and
``configure_model`` (strip what the loaded class built but training does not use, freeze
encoders) right after ``_build_module`` -- before LoRA and
before FSDP wrapping, as the adapter contract requires.

It is registered under its own ``model_type`` (``omni_language_model``, set by the
translated config) because verl's ``(language_model, fsdp|fsdp2)`` slot is taken and its
registry refuses duplicates. verl's ``_build_module`` only loads a causal LM when the
model type is ``language_model``; ``compat.as_language_model`` presents that name for the
duration of the call.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import torch
from torch.distributed.tensor import DTensor
from verl.utils.device import get_device_id
from verl.utils.fsdp_utils import merged_lora_context, normalize_peft_param_name, offload_fsdp_model_to_cpu
from verl.utils.model import convert_weight_keys
from verl.workers.engine.base import EngineRegistry
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
from verl.workers.engine.fsdp.utils import unfuse_moe_params

from omni_contracts import SchemaError
from omni_verl.adapters import rollout_adapter, training_adapter
from omni_verl.compat import (
    as_language_model,
    auto_class_owns,
    empty_weights_for_transformers,
    model_class_for,
)
from omni_rollout.placeholders import policy_logit_mask
from omni_verl.processor import adapter_processor
from omni_verl.settings import OMNI_MODEL_TYPE, VerlSettings
from omni_training.logit_mask import mask_policy_logits
from omni_training.model_loading import DEFAULT_AUTO_CLASS  # what the local engine loads


def ensure_tie_word_embeddings(hf_config: Any) -> None:
    """verl's loader reads ``hf_config.tie_word_embeddings``; a composite config such as
    ``Qwen3OmniMoeConfig`` (transformers 5.10) has none at the top level. Take the text
    model's value (it decides whether verl may load on the meta device)."""
    if not hasattr(hf_config, "tie_word_embeddings"):
        text_config = hf_config.get_text_config()
        hf_config.tie_word_embeddings = bool(getattr(text_config, "tie_word_embeddings", False))


def ensure_auto_class(hf_config: Any, adapter: Any) -> None:
    """Make the auto class verl picks (``get_hf_auto_model_class``) load the class the local
    engine loads: the adapter's ``policy_class``, else its ``auto_model_class`` or
    ``AutoModelForMultimodalLM``.

    verl's loader calls ``auto_class.from_pretrained(path, config=hf_config)`` and resolves
    ``AutoModel`` for configs it does not know (Qwen3-Omni's among them). The class is
    registered for the config with transformers' own ``Auto*.register``. The registration is
    process-wide; in verl's worker processes every load of this config is the policy's.
    """
    import transformers
    from verl.utils.model import get_hf_auto_model_class

    verl_auto = get_hf_auto_model_class(hf_config=hf_config)
    config_cls = type(hf_config)
    policy_class = adapter.policy_class(hf_config)
    if policy_class is not None:
        verl_auto.register(config_cls, policy_class, exist_ok=True)
        return
    if auto_class_owns(verl_auto, config_cls):
        return
    ours = getattr(transformers, adapter.auto_model_class or DEFAULT_AUTO_CLASS)
    if not auto_class_owns(ours, config_cls):
        raise RuntimeError(
            f"Neither {verl_auto.__name__} (verl's choice) nor {ours.__name__} loads "
            f"{config_cls.__name__}; set auto_model_class on {type(adapter).__name__} or register "
            "the model class in its register_auto_classes()."
        )
    verl_auto.register(config_cls, model_class_for(ours, config_cls), exist_ok=True)


T = TypeVar("T")


def select_synced_weights(
    weights: Iterable[tuple[str, T]], prefixes: Sequence[str] | None
) -> Iterator[tuple[str, T]]:
    """The ``(name, tensor)`` pairs of ``weights`` a sync sends: those whose name starts with
    one of ``prefixes`` (all of them when ``None``), lazily and in order.

    The input is always consumed to its end (a distributed actor's stream gathers each
    tensor with a collective, which every rank must run in the same order).

    Raises:
        SchemaError: ``prefixes`` is given and no name starts with one of them (the actor's
            names and the stage's differ; a sync that sends nothing would go unnoticed).
    """
    if prefixes is None:
        yield from weights
        return
    wanted = tuple(prefixes)
    sent = 0
    seen: list[str] = []  # a few names that were not sent, for the error
    for name, tensor in weights:
        if name.startswith(wanted):
            sent += 1
            yield name, tensor
        elif len(seen) < 3:
            seen.append(name)
    if not sent:
        raise SchemaError(
            f"No actor parameter is named under {list(wanted)} (the weight-sync stages' prefixes), e.g. {seen}; "
            "the actor's names must be the checkpoint's, as the stage loads them."
        )


def synced_weight_prefixes(settings: VerlSettings) -> tuple[str, ...] | None:
    """The name prefixes of the parameters the run's weight-sync stages load (the rollout
    adapter's ``weight_sync_prefixes``); ``None``: all of them."""
    return rollout_adapter(settings).weight_sync_prefixes(settings.pipeline_mode)


def configure_for_training(module: Any, hf_config: Any, settings: VerlSettings) -> None:
    """Apply the run's training adapter to a loaded module (before LoRA and FSDP)."""
    adapter = training_adapter(hf_config, settings)
    adapter.configure_model(module, hf_config)
    if not getattr(module, "_no_split_modules", None):
        raise RuntimeError(
            f"{type(adapter).__name__}.configure_model left _no_split_modules empty; FSDP would "
            "wrap the whole model as one unit. Set it to the decoder layer class name."
        )


def cast_lora_parameters(module: Any, precision: str | None) -> None:
    """verl-omni's ``lora_dtype``: after verl's ``_build_lora_module`` (which casts a LoRA adapter
    to its base's dtype), the trainable parameters go to ``precision`` (verl's names: ``fp32``,
    ``float32``, ``bf16`` ...; ``None``: left as verl built them), and PEFT's layers stop casting
    their input to the adapter's dtype (FSDP2's mixed precision computes every parameter in its
    ``param_dtype``). A bf16 base with an fp32 adapter: the adapter's small steps are kept."""
    if precision is None:
        return
    from peft.tuners.tuners_utils import BaseTunerLayer
    from verl.utils.torch_dtypes import PrecisionType

    dtype = PrecisionType.to_dtype(precision)
    for parameter in module.parameters():
        if parameter.requires_grad:
            parameter.data = parameter.data.to(dtype)
    for layer in module.modules():
        if isinstance(layer, BaseTunerLayer):
            # read by PEFT's _cast_input_dtype with getattr (not a declared attribute)
            setattr(layer, "cast_input_dtype_enabled", False)


def merged_lora_weights(module: Any, model_type: str | None) -> Iterator[tuple[str, torch.Tensor]]:
    """Each weight of an FSDP-wrapped PEFT ``module`` with its LoRA adapters merged in, under
    the checkpoint's names, in the dtype the actor holds it in (an fp32 rollout gets the fp32
    weights the actor scores with; a bf16 one rounds them on load, as for a full fine-tune).

    Every tensor is a copy: verl's ``merged_lora_context`` restores the unmerged base weights
    when the stream ends, and both the state dict and, on one rank, ``DTensor.full_tensor()``
    alias the live storage (a consumer reading after the restore would get the base alone)."""

    def copies(state: Mapping[str, Any]) -> Iterator[tuple[str, torch.Tensor]]:
        device = get_device_id()
        for name, tensor in state.items():
            if isinstance(tensor, DTensor):
                on_device: DTensor = tensor.to(device, non_blocking=True)  # type: ignore[assignment]
                yield name, on_device.full_tensor().clone()
            else:
                yield name, tensor.detach().clone()

    with merged_lora_context(module, backup_adapters=True):
        peft_model = getattr(module, "_fsdp_wrapped_module", module)
        state = convert_weight_keys(normalize_peft_param_name(module.state_dict()), peft_model)
        yield from unfuse_moe_params(copies(state), model_type)


AGENT_LOOP_EXTRA_FIELDS = "extra_fields"
"""Where verl's TransferQueue agent-loop worker keeps each row's ``AgentLoopOutput.extra_fields``."""


def non_tensor_rows(value: Any) -> list[Any]:
    """A batched non-tensor field of a verl micro-batch (a ``NonTensorStack`` of
    ``NonTensorData``, or a plain sequence) as one Python object per row."""
    from tensordict.tensorclass import NonTensorData  # type: ignore[import-untyped]

    items = value.tolist() if hasattr(value, "tolist") and not isinstance(value, torch.Tensor) else list(value)
    return [item.data if isinstance(item, NonTensorData) else item for item in items]


def adapter_model_inputs(adapter: Any, hf_config: Any, model_inputs: dict[str, Any], micro_batch: Any) -> dict[str, Any]:
    """``model_inputs`` with the adapter's declared extra fields of ``micro_batch`` (the agent
    loop's ``extra_fields``, carried by verl as non-tensor batch entries, at the top level or
    in each row's ``extra_fields``) passed through its ``prepare_model_inputs``; unchanged for
    an adapter that declares none.

    Raises:
        ValueError: the fields are declared but verl packed the rows (``use_remove_padding``):
            a model that reads per-row fields needs the padded rows.
    """
    specs = adapter.extra_field_specs
    if not specs:
        return model_inputs
    if model_inputs.get("attention_mask") is None:
        raise ValueError(
            f"{type(adapter).__name__} reads per-row extra fields, which verl's packed rows (use_remove_padding=true) "
            "cannot carry; set actor_rollout_ref.model.use_remove_padding=false."
        )
    keys = set(micro_batch.keys())
    # verl's batch-returning worker puts each extra field at the top level; its TransferQueue
    # worker stores the agent loop's whole ``extra_fields`` dict per row.
    nested = non_tensor_rows(micro_batch.get(AGENT_LOOP_EXTRA_FIELDS)) if AGENT_LOOP_EXTRA_FIELDS in keys else []
    fields: dict[str, list[Any]] = {}
    for key in specs:
        if key in keys:
            fields[key] = non_tensor_rows(micro_batch.get(key))
        elif any(isinstance(row, Mapping) and key in row for row in nested):
            fields[key] = [row.get(key) if isinstance(row, Mapping) else None for row in nested]
    return adapter.prepare_model_inputs(model_inputs, fields, hf_config)


@EngineRegistry.register(model_type=OMNI_MODEL_TYPE, backend=["fsdp", "fsdp2"], device=["cuda", "npu", "cpu"])
class OmniFSDPEngine(FSDPEngineWithLMHead):
    """verl's FSDP engine with the omni-rl training adapter applied before LoRA and FSDP, and
    the adapter's extra fields (a talker's codes and conditioning) passed to the forward."""

    def prepare_model_inputs(self, micro_batch: Any) -> Any:
        model_inputs, output_args = super().prepare_model_inputs(micro_batch)
        return adapter_model_inputs(self.omni_adapter, self.model_config.hf_config, model_inputs, micro_batch), output_args

    def get_per_tensor_param(self, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """verl's stream of the actor's weights for the rollout (``update_weights`` and the
        checkpoint engines read it), cut to what the weight-sync stages load
        (:func:`synced_weight_prefixes`): a talker run sends ``talker.*``, not the frozen 30B
        thinker the talker stage would throw away; a thinker run, everything, as before."""
        weights, peft_config = super().get_per_tensor_param(*args, **kwargs)
        return select_synced_weights(weights, synced_weight_prefixes(VerlSettings.from_env())), peft_config

    def _merged_lora_per_tensor_param(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The merged (base + adapter) weights a LoRA run syncs to the rollout, as the full
        fine-tune's stream sends its weights: in the actor's dtype and with packed MoE experts
        split into vLLM's per-expert keys (:func:`merged_lora_weights`). verl 0.9.1's own
        rounds every sharded weight to bf16 and sends packed experts as they are."""
        try:
            yield from merged_lora_weights(self.module, self.model_config.hf_config.model_type)
        finally:
            if self._is_offload_param:
                offload_fsdp_model_to_cpu(self.module)

    def _build_lora_module(self, module: Any) -> Any:
        module = super()._build_lora_module(module)
        cast_lora_parameters(module, VerlSettings.from_env().lora_dtype)
        return module

    def _build_module(self) -> Any:
        settings = VerlSettings.from_env()
        adapter = training_adapter(self.model_config.hf_config, settings)
        self.omni_adapter = adapter
        adapter.register_auto_classes()
        ensure_auto_class(self.model_config.hf_config, adapter)
        ensure_tie_word_embeddings(self.model_config.hf_config)
        with as_language_model(self.model_config), empty_weights_for_transformers():
            module = super()._build_module()
        configure_for_training(module, self.model_config.hf_config, settings)
        # The actor (and the ref) score what vLLM-Omni samples: its processed log-probs are
        # under the policy stage's logit mask (omni_training.logit_mask).
        processor = adapter_processor(settings)
        mask = policy_logit_mask(
            rollout_adapter(settings), settings.pipeline_mode, self.model_config.hf_config, processor,
            getattr(processor, "tokenizer", processor),
        )
        mask_policy_logits(module, mask)
        return module
