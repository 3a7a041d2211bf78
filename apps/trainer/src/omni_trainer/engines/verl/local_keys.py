"""Local-engine keys on the verl engine: each one honoured, or refused by name with the reason.

The mirror of :mod:`omni_trainer.engines.local.verl_keys` (the local engine's refusals of verl's keys). A few
keys of the schema are omni-rl's own and only the local engine reads them (its compute dtype,
its old-log-prob shortcut, its seed, its in-process teacher); verl 0.9.1 has no counterpart, so
under ``trainer.engine=verl`` they would change nothing. Each is declared so on its schema field
(``engines="local"``, with what verl does instead and the values that say what verl already
does: :mod:`omni_trainer.keys`), the talker-drift keys too. A key the overrides gave
(``Config.given_keys``) with any other value is refused by :func:`verl_refusals`, one line per
key. Keys that only one task reads are the task's to check.
"""

from __future__ import annotations

from omni_trainer.config import Config
from omni_trainer.keys import engine_refusals


def verl_refusals(config: Config) -> list[str]:
    """One problem per local-engine key the overrides gave whose value the verl engine does
    not honour, each naming the key, what the local engine does with it and what verl does."""
    return engine_refusals(config, "verl", config.given_keys)
