"""Kept/dropped bookkeeping shared by the converters."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class SplitReport:
    """Counts for one split: rows read, kept, and dropped per stable reason."""

    split: str
    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    tallies: dict[str, Counter[str]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.kept + sum(self.dropped.values())

    def keep(self) -> None:
        self.kept += 1

    def drop(self, reason: str) -> None:
        self.dropped[reason] += 1

    def tally(self, name: str, value: str) -> None:
        """Count ``value`` under a named tally (e.g. MMK12's answer types)."""
        self.tallies.setdefault(name, Counter())[value] += 1

    def lines(self) -> list[str]:
        reasons = ", ".join(f"{r}={n}" for r, n in sorted(self.dropped.items())) or "none"
        out = [
            f"{self.split}: read {self.total}, kept {self.kept}, "
            f"dropped {sum(self.dropped.values())} ({reasons})"
        ]
        for name, counts in sorted(self.tallies.items()):
            values = ", ".join(f"{v}={n}" for v, n in sorted(counts.items()))
            out.append(f"{self.split}: {name}: {values}")
        return out


@dataclass
class ConversionReport:
    """Per-split reports of one converter run, in the order the splits were converted."""

    name: str
    splits: dict[str, SplitReport] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    """Input files not converted (path relative to the input directory → why)."""

    def split(self, split: str) -> SplitReport:
        return self.splits.setdefault(split, SplitReport(split))

    def format(self) -> str:
        lines = [f"[{self.name}]"]
        for report in self.splits.values():
            lines.extend("  " + line for line in report.lines())
        for path, why in self.skipped.items():
            lines.append(f"  skipped {path}: {why}")
        for split, path in self.outputs.items():
            lines.append(f"  {split} -> {path}")
        return "\n".join(lines)
