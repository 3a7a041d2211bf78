"""verl-engine keys on the local engine: each one honoured, or refused by name with the reason.

A verl run script carries over (docs/coming-from-verl-omni.md): every key verl-omni's Qwen3-Omni launchers pass is
in the schema and reaches verl with verl's meaning (``engines.verl.translate``). Many of them
size or place verl's workers (FSDP, vLLM-Omni, Ray) and have no counterpart in the local
engine's one process. Each such key is declared so on its schema field (``engines="verl"``:
what verl does with it, what the local engine does instead, and which values describe what
the local engine already does, such as ``tensor_model_parallel_size=1`` or
``param_offload=false``: those are honoured; :mod:`omni_trainer.keys`). A key the overrides
gave (``Config.given_keys``) with any other value is refused by :func:`local_refusals`, one
line per key; nothing is dropped in silence. Values from the packaged defaults are not the
user's and are never refused.
"""

from __future__ import annotations

from omni_trainer.config import Config
from omni_trainer.keys import DeclaredKey, declared_keys, engine_refusals


def local_refusals(config: Config) -> list[str]:
    """One problem per verl-engine key the overrides gave whose value the local engine does
    not honour, each naming the key, what verl does with it and what the local engine does."""
    return engine_refusals(config, "local", config.given_keys)


def verl_key(name: str) -> DeclaredKey | None:
    """The verl-only declaration covering the dotted ``name`` (itself, its section, or the
    dict-valued key it lies under), or ``None`` for a key the local engine reads."""
    covering = [d for d in declared_keys(Config) if d.doc.engines == "verl" and d.covers(name)]
    return max(covering, key=lambda d: len(d.name), default=None)
