"""verl's checkpoints in a run directory, checked before Ray starts.

verl saves step N as ``<run>/global_step_N/<role>/{model,optim,extra_state}_world_size_W_rank_R.pt``
(one shard per rank, each a ``torch.save`` zip archive) plus ``global_step_N/data.pt`` (the
dataloader), then writes N to ``latest_checkpointed_iteration.txt``. On ``resume_mode=auto``
it loads the step that file names, and no other: a damaged newest step fails every rerun
minutes in, on the workers, and a missing one silently trains from scratch. Here each step is
checked by its archives' framing (every rank's shard present, each zip's central directory
intact: what a truncated or half-written file loses), without reading the tensors, so a
30B checkpoint is checked in milliseconds.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from omni_trainer.config import ConfigError
from omni_training.checkpoint import set_aside

STEP_PREFIX = "global_step_"
TRACKER = "latest_checkpointed_iteration.txt"
_SHARD = re.compile(r"(?P<kind>.+)_world_size_(?P<size>\d+)_rank_(?P<rank>\d+)\.pt")


def step_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """Each ``global_step_<N>`` folder of ``run_dir`` (set-aside ones excluded), oldest first."""
    found = []
    for path in run_dir.glob(f"{STEP_PREFIX}*"):
        number = path.name.removeprefix(STEP_PREFIX)
        if path.is_dir() and number.isdigit():
            found.append((int(number), path))
    return sorted(found)


def tracked_step(run_dir: Path) -> int:
    """The step ``latest_checkpointed_iteration.txt`` names (0: none, or not a number)."""
    tracker = run_dir / TRACKER
    text = tracker.read_text().strip() if tracker.is_file() else ""
    return int(text) if text.isdigit() else 0


def _archive_problem(path: Path) -> str | None:
    try:
        with zipfile.ZipFile(path) as archive:
            size = path.stat().st_size
            for member in archive.infolist():
                if member.header_offset + member.compress_size > size:
                    return f"{path.name} is truncated (member {member.filename} ends past the file)"
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        return f"{path.name} is truncated or corrupt ({exc})"
    return None


def checkpoint_problem(step_dir: Path) -> str | None:
    """Why verl could not resume from ``step_dir``, or ``None``: no role folder with shards, a
    rank's shard missing, a shard or ``data.pt`` that is not a whole ``torch.save`` archive."""
    roles = sorted(p for p in step_dir.iterdir() if p.is_dir() and any(p.glob("*_world_size_*_rank_*.pt")))
    if not roles:
        return "no actor shards (model_world_size_<W>_rank_<R>.pt)"
    for role in roles:
        ranks: dict[tuple[str, int], set[int]] = {}
        for shard in sorted(role.glob("*_world_size_*_rank_*.pt")):
            match = _SHARD.fullmatch(shard.name)
            if match is None:
                continue
            ranks.setdefault((match["kind"], int(match["size"])), set()).add(int(match["rank"]))
            problem = _archive_problem(shard)
            if problem:
                return f"{role.name}/{problem}"
        for (kind, size), present in sorted(ranks.items()):
            missing = sorted(set(range(size)) - present)
            if missing:
                shown = ", ".join(f"{kind}_world_size_{size}_rank_{rank}.pt" for rank in missing[:3])
                return f"{role.name}/ lacks {shown}{' ...' if len(missing) > 3 else ''}"
    data = step_dir / "data.pt"
    if data.is_file():
        return _archive_problem(data)
    return None


@dataclass
class ResumePoint:
    """The step a ``resume_mode=auto`` run resumes after (0: starts from scratch) and what was
    done to get there (each line printed before the run)."""

    step: int
    notes: list[str] = field(default_factory=list)


def auto_resume_point(run_dir: Path) -> ResumePoint:
    """The newest usable checkpoint of ``run_dir`` for ``resume_mode=auto``, made the one verl
    loads: each damaged step newer than it (and any step saved past the tracker's, a save that
    never finished) is renamed ``global_step_<N>.broken``, and the tracker names it.

    Raises:
        ConfigError: the run has checkpoints and none is usable (nothing is moved: starting
            over is the user's call, with ``resume_mode=disable``).
    """
    tracked = tracked_step(run_dir)
    steps = step_dirs(run_dir)
    if not steps:
        if tracked:
            raise ConfigError(
                f"Invalid configuration:\n  - {run_dir / TRACKER} names step {tracked}, but {run_dir} holds no "
                f"{STEP_PREFIX}<N> folder: no usable checkpoint to resume. trainer.resume_mode=disable starts "
                "over (this run's files are moved aside first)"
            )
        return ResumePoint(0)
    broken: list[tuple[Path, str]] = []
    chosen: tuple[int, Path] | None = None
    for step, path in reversed(steps):
        problem = checkpoint_problem(path)
        if tracked and step > tracked:
            problem = f"saved after the last finished checkpoint (step {tracked}){'; ' + problem if problem else ''}"
        if problem is None:
            chosen = (step, path)
            break
        broken.append((path, problem))
    if chosen is None:
        reasons = "\n".join(f"    {path.name}: {problem}" for path, problem in broken)
        raise ConfigError(
            f"Invalid configuration:\n  - no usable checkpoint in {run_dir}:\n{reasons}\n"
            "  trainer.resume_mode=disable starts over (this run's files are moved aside first)"
        )
    notes = []
    for path, problem in broken:
        moved = set_aside(path)
        notes.append(f"checkpoint {path} cannot be resumed ({problem}); set aside as {moved.name}")
    step, path = chosen
    if tracked != step:
        (run_dir / TRACKER).write_text(str(step))
        named = f"{TRACKER} named step {tracked}; " if tracked else ""
        notes.append(f"{named}resuming from {path.name}, the newest usable checkpoint")
    return ResumePoint(step, notes)


def later_steps(run_dir: Path, step: int) -> list[str]:
    """The ``global_step_<N>`` folders of ``run_dir`` past ``step``, by name."""
    return [path.name for number, path in step_dirs(run_dir) if number > step]
