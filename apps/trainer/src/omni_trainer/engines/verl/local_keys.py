"""Local-engine keys on the verl engine: each one honoured, or refused by name with the reason.

The mirror of :mod:`omni_trainer.verl_keys` (the local engine's refusals of verl's keys). A few keys of the schema are omni-rl's own and
only the local engine reads them (its compute dtype, its old-log-prob shortcut, its seed, its
in-process teacher); verl 0.9.1 has no counterpart, so under ``trainer.engine=verl`` they
would change nothing. :data:`LOCAL_KEYS` says, per key, what the local engine does with it
and what verl does instead, and which values describe what verl already does: those are
honoured. A key the overrides gave (``Config.given_keys``) with any other value is refused
by :func:`verl_refusals`, one line per key. The talker-drift keys are refused on verl by the
pre-flight itself (:mod:`omni_trainer.preflight`), and keys that only one task reads are the
task's to check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni_trainer.config import Config
from omni_trainer.verl_keys import select, show


@dataclass(frozen=True)
class LocalKey:
    """A local-engine key: ``local`` is what the local engine does with it, ``verl`` what the
    verl engine does instead; ``honoured`` are the values that say what verl does."""

    key: str
    local: str
    verl: str
    honoured: tuple[Any, ...] = ()

    def honours(self, value: Any) -> bool:
        return any(value == item and isinstance(value, bool) == isinstance(item, bool) for item in self.honoured)


TEACHER = "distillation.teacher_models.teacher_model"

LOCAL_KEYS: tuple[LocalKey, ...] = (
    LocalKey("actor_rollout_ref.actor.dtype",
             "the actor's compute dtype, auto: bfloat16 on a GPU and float32 on the CPU",
             "holds the actor in actor_rollout_ref.actor.fsdp_config.model_dtype and computes under FSDP's mixed "
             "precision (honours auto)", ("auto",)),
    LocalKey("actor_rollout_ref.actor.old_log_prob",
             "auto: an on-policy step takes its old log-probs from the update's own forward",
             "computes the old log-probs in a pass of their own, or takes the rollout's with "
             "algorithm.rollout_correction.bypass_mode=true (honours recompute)", ("recompute",)),
    LocalKey("actor_rollout_ref.model.lora_dropout", "dropout on the LoRA path",
             "builds its FSDP LoRA (verl 0.9.1) without dropout (honours 0)", (0.0,)),
    LocalKey("trainer.seed", "seeds torch and Python's random: LoRA's initial weights, sampling",
             "seeds its workers with verl's own seeds (42); data.seed shuffles the data on both engines"),
    LocalKey(f"{TEACHER}.log_prob_micro_batch_size_per_gpu", "samples per forward of the in-process teacher",
             f"serves the teacher from rollout servers sized by {TEACHER}.inference.*"),
    LocalKey(f"{TEACHER}.param_offload", "keeps the in-process teacher's weights on the CPU between uses",
             "serves the teacher from rollout servers on GPUs of their own (honours false)", (False,)),
)


def verl_refusals(config: Config) -> list[str]:
    """One problem per local-engine key the overrides gave whose value the verl engine does
    not honour, each naming the key, what the local engine does with it and what verl does."""
    given = set(config.given_keys)
    return [
        f"{spec.key}={show(select(config, spec.key))} is a local-engine setting ({spec.local}); the verl engine "
        f"{spec.verl}. Drop it, or use trainer.engine=local"
        for spec in LOCAL_KEYS
        if spec.key in given and not spec.honours(select(config, spec.key))
    ]
