"""What the actor sends at a weight sync, and how it is staged for vLLM-Omni to read.

vLLM-Omni 0.28 runs every stage's engine core in its own process and forwards control
calls over msgpack without type information, so neither tensors nor a ``LoRARequest``
survive an untyped ``collective_rpc`` argument (they arrive as plain lists). Both payloads
therefore travel through the file system, in the formats vLLM already reads:

- ``lora``: a PEFT adapter directory (``adapter_config.json`` +
  ``adapter_model.safetensors``), served through a ``LoRARequest(lora_path=...)``;
- ``full``: a ``model.safetensors`` with checkpoint-format names, loaded in place by the
  worker's ``reload_weights(weights_path=...)``; only the names the synced stages load
  (:func:`synced_only`).

Only the directory path (a string) crosses the process boundary. Torch and safetensors are
imported inside the functions.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_contracts import select_synced_weights

if TYPE_CHECKING:
    import torch

LORA_CONFIG_FILE = "adapter_config.json"
LORA_WEIGHTS_FILE = "adapter_model.safetensors"
FULL_WEIGHTS_FILE = "model.safetensors"


class PayloadError(ValueError):
    """A weight-sync payload cannot be staged as given."""


@dataclass(frozen=True)
class LoraWeights:
    """The actor's LoRA adapter, as PEFT holds it.

    Attributes:
        tensors: the adapter state dict under PEFT's names (what
            ``peft.get_peft_model_state_dict`` returns, e.g.
            ``base_model.model.thinker.model.layers.0.self_attn.q_proj.lora_A.weight``).
        config: the adapter config as a dict (``LoraConfig.to_dict()``); needs at least
            ``r``, ``lora_alpha`` and ``target_modules``.
    """

    tensors: Mapping[str, torch.Tensor]
    config: Mapping[str, Any]


@dataclass(frozen=True)
class FullWeights:
    """Merged weights for the synced stages, under checkpoint names.

    Names are those of the Hugging Face checkpoint the engine loaded (for Qwen3-Omni:
    ``thinker.model.layers.0.mlp.gate.weight``, ...); each stage's model loads the names it
    owns and ignores the rest. A subset of the weights is fine (only those are replaced); the
    engine stages only the names under the adapter's ``weight_sync_prefixes``, so a whole
    state dict may be passed without writing out the frozen stages' weights.
    """

    tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]


def synced_only(weights: FullWeights, prefixes: Sequence[str] | None) -> FullWeights:
    """``weights`` cut to the names under ``prefixes`` (the rollout adapter's
    ``weight_sync_prefixes``: what the synced stages load); unchanged when ``None``.

    Raises:
        SchemaError: prefixes are given and no name is under one (when staged).
    """
    if prefixes is None:
        return weights
    tensors = weights.tensors
    return FullWeights(select_synced_weights(tensors.items() if isinstance(tensors, Mapping) else tensors, prefixes))


def _json_safe(value: Any) -> Any:
    """PEFT configs hold sets and enums; ``adapter_config.json`` needs plain JSON."""
    if isinstance(value, enum.Enum):
        return _json_safe(value.value)
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(_json_safe(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _cpu_state_dict(
    tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]], what: str
) -> dict[str, torch.Tensor]:
    """Detached, contiguous CPU copies that do not share storage (safetensors needs that)."""
    items = tensors.items() if isinstance(tensors, Mapping) else tensors
    state: dict[str, torch.Tensor] = {}
    for name, tensor in items:
        if name in state:
            raise PayloadError(f"{what} names tensor {name!r} twice.")
        state[name] = tensor.detach().to("cpu").contiguous().clone()
    if not state:
        raise PayloadError(f"{what} holds no tensors; nothing to sync.")
    return state


def stage_lora(weights: LoraWeights, directory: str | Path) -> Path:
    """Write ``weights`` as a PEFT adapter directory vLLM's LoRA loader reads.

    Raises:
        PayloadError: no tensors, a tensor name that is not a LoRA weight, or a config
            without ``r`` / ``target_modules``.
    """
    from safetensors.torch import save_file

    missing = [key for key in ("r", "target_modules") if key not in weights.config]
    if missing:
        raise PayloadError(
            f"LoRA config lacks {missing}; pass the adapter's full PEFT config "
            "(peft_model.peft_config[adapter_name].to_dict())."
        )
    state = _cpu_state_dict(weights.tensors, "The LoRA payload")
    not_lora = sorted(name for name in state if "lora_" not in name)
    if not_lora:
        raise PayloadError(
            f"LoRA payload holds non-LoRA tensors {not_lora[:3]}; send only the adapter "
            "(peft.get_peft_model_state_dict), or use payload='full' for merged weights."
        )
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    (target / LORA_CONFIG_FILE).write_text(json.dumps(_json_safe(weights.config), indent=2))
    save_file(state, str(target / LORA_WEIGHTS_FILE))
    return target


def stage_full(weights: FullWeights, directory: str | Path) -> Path:
    """Write ``weights`` as a one-file safetensors checkpoint for ``reload_weights``.

    Raises:
        PayloadError: no tensors, or a name given twice.
    """
    from safetensors.torch import save_file

    state = _cpu_state_dict(weights.tensors, "The full-weights payload")
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    save_file(state, str(target / FULL_WEIGHTS_FILE))
    return target
