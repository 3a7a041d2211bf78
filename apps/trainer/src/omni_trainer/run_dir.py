"""What a run leaves behind: config.yaml, metrics.jsonl, curve.png, checkpoints/, summary.txt;
and how a run starts in its directory (:func:`prepare_run_dir`), before anything is loaded.

- ``trainer.resume_mode=auto`` (default): resume from the newest complete checkpoint. A
  newer checkpoint that is incomplete or truncated is renamed ``step_<N>.broken`` and named
  on the console; staging directories of a crashed save (``.tmp-step_*``) are deleted. A
  checkpoint of another model, stage or LoRA shape is refused before anything is written.
- ``trainer.resume_mode=disable``: start over. An earlier run in the directory is moved
  aside to ``<dir>.previous`` (``.previous.2``, ...); a non-empty directory that holds no
  run is refused.
- ``trainer.resume_mode=resume_path``: resume from the checkpoint ``trainer.resume_from_path``
  (a run's ``checkpoints/step_<N>``, this run's or another's: verl's meaning). Refused when this
  run directory already holds later steps (resuming would overwrite them).
- Resuming with other settings or data than the run was saved with is refused unless
  ``trainer.resume_anyway=true`` (:mod:`omni_trainer.resume_check`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from omni_trainer.config import Config, ConfigError
from omni_trainer.model_folder import model_fingerprint, same_model
from omni_trainer.resume_check import MODEL_IDENTITY_KEYS, check_resume, data_fingerprint, resume_notes
from omni_trainer.run_lock import LOCK_NAME

RUN_FILES = ("config.yaml", "metrics.jsonl", "summary.txt", "checkpoints", "curve.png")
"""Names whose presence marks a directory as a run directory."""
IDENTITY_KEYS = MODEL_IDENTITY_KEYS
"""``actor_rollout_ref.model.*`` keys a checkpoint is only valid for."""


@dataclass
class RunStart:
    """Where a run starts: its directory, the checkpoint to resume (if any), what was done."""

    run_dir: Path
    resume_from: Path | None = None
    start_step: int = 0
    notes: list[str] = field(default_factory=list)
    fingerprint: dict[str, Any] | None = None
    """The data's fingerprint, when resuming (:func:`omni_trainer.resume_check.data_fingerprint`)."""

    @property
    def checkpoints(self) -> Path:
        return self.run_dir / "checkpoints"


def run_identity(config: Config) -> dict[str, Any]:
    """What a checkpoint is only valid for: the model and the shape of what trains."""
    model = config.actor_rollout_ref.model
    identity: dict[str, Any] = {key: getattr(model, key) for key in IDENTITY_KEYS}
    identity["path"] = os.path.abspath(os.path.expanduser(model.path)) if model.path else None
    identity["model"] = model_fingerprint(model.path) if model.path else None  # the model by content
    identity["target_modules"] = list(model.target_modules) if model.target_modules else None
    return identity


def prepare_run_dir(config: Config) -> RunStart:
    """Decide how the run starts in ``trainer.default_local_dir``; reads before it writes.

    Raises:
        ConfigError: the directory holds a checkpoint of another model or LoRA shape, or
            (``resume_mode=disable``) files that are not a run.
    """
    from omni_training.checkpoint import clean_staging, newest_complete_checkpoint, read_state, set_aside

    start = RunStart(Path(config.trainer.default_local_dir).expanduser())
    if config.trainer.resume_mode == "disable":
        _move_earlier_run_aside(start)
        return start
    broken: list[tuple[Path, str]] = []
    newest: Path | None
    origin: Path | None
    if config.trainer.resume_mode == "resume_path":
        newest = _checkpoint_to_resume(config)
        origin = _run_dir_of(newest)
    else:
        newest, broken = newest_complete_checkpoint(start.checkpoints)
        origin = start.run_dir
        if newest is None and broken:
            reasons = "\n".join(f"    {path.name}: {problem}" for path, problem in broken)
            raise ConfigError(
                f"Invalid configuration:\n  - no usable checkpoint in {start.checkpoints}:\n{reasons}\n"
                "  trainer.resume_mode=disable starts over (this run's files are moved aside first)"
            )
    step = 0
    if newest is not None:
        state = read_state(newest)
        step = int(state["step"])
        _check_identity(config, origin or start.run_dir, newest, state)
        if config.trainer.resume_mode == "resume_path":
            _refuse_later_steps(start, newest, step)
        start.fingerprint = data_fingerprint(config)
        if origin is not None:
            start.notes.extend(resume_notes(check_resume(config, origin, step, start.fingerprint), step))
    for path in clean_staging(start.checkpoints):
        start.notes.append(f"deleted {path.name}, left by a save that did not finish")
    for path, problem in broken:
        moved = set_aside(path)
        start.notes.append(f"checkpoint {path} cannot be resumed ({problem}); set aside as {moved.name}")
    if newest is not None:
        start.resume_from = newest
        start.start_step = step
    return start


def _checkpoint_to_resume(config: Config) -> Path:
    """``trainer.resume_from_path`` as a complete checkpoint directory (relative: from the cwd)."""
    from omni_training.checkpoint import checkpoint_problem

    raw = config.trainer.resume_from_path
    if not raw:
        raise ConfigError(
            "Invalid configuration:\n  - trainer.resume_mode=resume_path needs trainer.resume_from_path (a run's "
            "checkpoints/step_<N> directory)"
        )
    path = Path(os.path.abspath(Path(raw).expanduser()))
    problem = checkpoint_problem(path) if path.is_dir() else "no such directory"
    if problem is not None:
        raise ConfigError(
            f"Invalid configuration:\n  - trainer.resume_from_path={raw}: {path} is not a checkpoint that can be "
            f"resumed ({problem}); point it at a run's checkpoints/step_<N> directory"
        )
    return path


def _run_dir_of(checkpoint: Path) -> Path | None:
    """The run directory a checkpoint was saved in (``<run>/checkpoints/step_<N>``), if it is one."""
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else None


def _refuse_later_steps(start: RunStart, checkpoint: Path, step: int) -> None:
    """Resuming ``step`` into a run directory that went further would overwrite its later steps."""
    from omni_training.checkpoint import checkpoint_dirs

    later = [p.name for p in checkpoint_dirs(start.checkpoints) if int(p.name.removeprefix("step_")) > step]
    refuse_later_steps(start.run_dir, later, checkpoint, step)


def refuse_later_steps(run_dir: Path, later_checkpoints: list[str], checkpoint: Path, step: int) -> None:
    """Refuse to resume ``checkpoint`` (step ``step``) into ``run_dir`` when it holds later
    checkpoints (``later_checkpoints``, by name) or metrics of later steps: the resumed run
    would overwrite them (either engine)."""
    metrics = run_dir / "metrics.jsonl"
    logged = [json.loads(line).get("step", 0) for line in metrics.read_text().splitlines() if line.strip()] \
        if metrics.is_file() else []
    past = [s for s in logged if s > step]
    held = []
    if later_checkpoints:
        held.append(f"checkpoints {', '.join(later_checkpoints)}")
    if past:
        held.append(f"metrics to step {int(max(past))}")
    if held:
        held_text = "; ".join(held)
        raise ConfigError(
            f"Invalid configuration:\n  - trainer.resume_from_path={checkpoint} is step {step}, but {run_dir} "
            f"already holds later steps ({held_text}); resuming there would overwrite them. Resume into another "
            "directory (e.g. trainer.experiment_name=<new name>), or move the later steps away first"
        )


def _move_earlier_run_aside(start: RunStart) -> None:
    run_dir = start.run_dir
    names = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_NAME) if run_dir.is_dir() else []
    if not names:
        return
    if not set(names) & set(RUN_FILES):
        raise ConfigError(
            f"Invalid configuration:\n  - trainer.resume_mode=disable: {run_dir} is not empty and holds no earlier "
            f"run ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}); point trainer.default_local_dir "
            "at an empty or new directory"
        )
    target = run_dir.with_name(run_dir.name + ".previous")
    number = 1
    while target.exists():
        number += 1
        target = run_dir.with_name(f"{run_dir.name}.previous.{number}")
    target.mkdir()
    for name in names:  # not the lock: this run holds it, in this directory
        (run_dir / name).rename(target / name)
    start.notes.append(f"trainer.resume_mode=disable: moved the earlier run in {run_dir} to {target}")


def _check_identity(config: Config, run_dir: Path, checkpoint: Path, state: Mapping[str, Any]) -> None:
    """Refuse to resume ``checkpoint`` into a run of another model, stage or LoRA shape."""
    saved = (state.get("state") or {}).get("identity")
    origin = f"{checkpoint}"
    if saved is None:  # saved before identities were recorded: the run's config.yaml says
        saved = _identity_from_config_file(run_dir / "config.yaml")
        origin = f"{checkpoint} (per {run_dir / 'config.yaml'})"
    if saved is None:
        return
    current = run_identity(config)
    differences = [
        f"actor_rollout_ref.model.{key}: checkpoint {saved.get(key)!r}, this run {current[key]!r}"
        for key in IDENTITY_KEYS
        if key in saved and key != "path" and saved.get(key) != current[key]
    ]
    if "path" in saved and not same_model(saved, current):  # by content: a copy or symlink is the same model
        compared = " (compared by content: config.json or weights differ)" if saved.get("model") and current["model"] else ""
        differences.insert(0, f"actor_rollout_ref.model.path: checkpoint {saved.get('path')!r}, this run "
                              f"{current['path']!r}{compared}")
    if differences:
        raise ConfigError(
            f"Invalid configuration:\n  - {origin} belongs to another run and cannot be resumed:\n      "
            + "\n      ".join(differences)
            + f"\n    Give this run its own trainer.experiment_name (or trainer.default_local_dir), or set "
            f"trainer.resume_mode=disable to move the earlier run in {run_dir} aside"
        )


def _identity_from_config_file(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        model = OmegaConf.to_container(OmegaConf.load(path)).get("actor_rollout_ref", {}).get("model", {})  # type: ignore[union-attr]
    except Exception:  # an unreadable config.yaml identifies nothing
        return None
    identity = {key: model[key] for key in IDENTITY_KEYS if key in model}
    if identity.get("path"):
        identity["path"] = os.path.abspath(os.path.expanduser(str(identity["path"])))
    return identity


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
