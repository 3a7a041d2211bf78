"""What the pre-flight's checks report (:mod:`omni_trainer.preflight`, each engine's own)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from omni_trainer.resolved import ResolvedRun


@dataclass
class Findings:
    """What the checks found: problems stop the run, warnings are printed."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


Check = Callable[[ResolvedRun, Findings], None]
"""One check: reads the resolved run (its config, what its files say), appends to the findings."""


def one_of(found: Findings, key: str, value: object, valid: tuple[str, ...]) -> None:
    """A problem unless ``value`` is one of ``valid``."""
    if value not in valid:
        found.problems.append(f"{key}={value!r}; valid: {', '.join(sorted(valid))}")


def one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split())
