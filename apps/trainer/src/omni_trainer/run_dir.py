"""What a run leaves behind: config.yaml, metrics.jsonl, curve.png, checkpoints/, summary.txt."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path


class MetricsLog:
    """``metrics.jsonl``: one JSON object per step. Resuming drops lines past the checkpoint."""

    def __init__(self, path: Path, *, resume_after: int | None = None) -> None:
        self.path = path
        self.rows: list[dict[str, float]] = []
        if path.exists():
            kept = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if resume_after is not None:
                kept = [row for row in kept if row.get("step", 0) <= resume_after]
            else:
                kept = []
            self.rows = kept
        path.write_text("".join(json.dumps(row) + "\n" for row in self.rows))

    def append(self, row: Mapping[str, float]) -> None:
        clean = {key: (None if isinstance(v, float) and not math.isfinite(v) else v) for key, v in row.items()}
        self.rows.append(dict(row))
        with self.path.open("a") as handle:
            handle.write(json.dumps(clean) + "\n")

    def series(self, key: str) -> list[tuple[float, float]]:
        return [(row["step"], row[key]) for row in self.rows if isinstance(row.get(key), int | float)]


def draw_curve(path: Path, series: Mapping[str, Sequence[tuple[float, float]]], title: str) -> None:
    """A small line chart (PNG) of ``series`` in [0, 1] against step, drawn with Pillow."""
    from PIL import Image, ImageDraw

    width, height, margin = 640, 360, 40
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    draw.text((margin, 10), title, fill="black")
    left, top, right, bottom = margin, margin, width - margin // 2, height - margin
    draw.rectangle((left, top, right, bottom), outline="black")
    for level in (0.0, 0.5, 1.0):
        y = bottom - level * (bottom - top)
        draw.line((left, y, right, y), fill=(220, 220, 220))
        draw.text((5, y - 6), f"{level:.1f}", fill="black")
    last_step = max((s for points in series.values() for s, _ in points), default=1) or 1
    colours = [(31, 119, 180), (214, 39, 40), (44, 160, 44)]
    for number, (name, points) in enumerate(series.items()):
        colour = colours[number % len(colours)]
        xy = [
            (left + (step / last_step) * (right - left), bottom - max(0.0, min(1.0, value)) * (bottom - top))
            for step, value in points
        ]
        if len(xy) > 1:
            draw.line(xy, fill=colour, width=2)
        draw.text((right - 150, top + 8 + 14 * number), name, fill=colour)
    draw.text((right - 60, bottom + 8), f"step {int(last_step)}", fill="black")
    image.save(path)
