"""Checkpoints of the actor: weights, optimizer, schedule, RNG and the caller's state.

Layout of ``<root>/step_<N>/``: ``adapter/`` (PEFT format, loadable with
``PeftModel.from_pretrained``) or ``model/`` (safetensors, full weights), ``optim.pt``
(optimizer and scheduler), ``rng.pt``, ``state.json`` (step and the caller's state, e.g. the
data-loader position). A checkpoint is written to a hidden temporary directory and renamed
into place, so a crash mid-save never leaves a directory that looks complete.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from omni_training.actor import Actor

STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoint_dirs(root: str | Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(root: str | Path) -> Path | None:
    dirs = checkpoint_dirs(root)
    return dirs[-1] if dirs else None


STAGING_PREFIX = ".tmp-step_"


def clean_staging(root: str | Path) -> list[Path]:
    """Delete the staging directories a crashed save left under ``root``; returns them."""
    root = Path(root)
    if not root.is_dir():
        return []
    stale = sorted(p for p in root.iterdir() if p.name.startswith(STAGING_PREFIX) and p.is_dir())
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def checkpoint_problem(directory: str | Path) -> str | None:
    """Why ``directory`` cannot be resumed from (a missing or truncated file), or None.

    Reads every file's framing without building tensors: the zip archives ``torch.save``
    writes (their CRCs), the safetensors header against the file size, ``state.json``.
    """
    directory = Path(directory)
    kind = "adapter" if (directory / "adapter").is_dir() else "model"
    weights = directory / kind / ("adapter_model.safetensors" if kind == "adapter" else "model.safetensors")
    missing = [p.name for p in (weights, directory / "optim.pt", directory / "rng.pt", directory / "state.json")
               if not p.is_file()]
    if missing:
        return f"missing {', '.join(missing)}"
    for name in ("optim.pt", "rng.pt"):
        try:
            with zipfile.ZipFile(directory / name) as archive:
                bad = archive.testzip()
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            return f"{name} is truncated or corrupt ({exc})"
        if bad is not None:
            return f"{name} is corrupt (member {bad} fails its CRC)"
    problem = _safetensors_problem(weights)
    if problem:
        return problem
    try:
        state = json.loads((directory / "state.json").read_text())
        int(state["step"])
    except (ValueError, KeyError, TypeError, OSError) as exc:
        return f"state.json is unreadable ({exc})"
    return None


def _safetensors_problem(path: Path) -> str | None:
    size = path.stat().st_size
    try:
        with path.open("rb") as handle:
            header_size = int.from_bytes(handle.read(8), "little")
            if header_size <= 0 or 8 + header_size > size:
                return f"{path.name} is truncated (header past the end of the file)"
            header = json.loads(handle.read(header_size))
    except (ValueError, OSError) as exc:
        return f"{path.name} is corrupt ({exc})"
    ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    if 8 + header_size + max(ends, default=0) > size:
        return f"{path.name} is truncated ({size} bytes, its header needs {8 + header_size + max(ends)})"
    return None


def newest_complete_checkpoint(root: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest checkpoint under ``root`` that can be resumed from, and each newer one that
    cannot, with the reason (newest first)."""
    broken: list[tuple[Path, str]] = []
    for directory in reversed(checkpoint_dirs(root)):
        problem = checkpoint_problem(directory)
        if problem is None:
            return directory, broken
        broken.append((directory, problem))
    return None, broken


def set_aside(directory: str | Path, suffix: str = "broken") -> Path:
    """Rename ``step_<N>`` to ``step_<N>.<suffix>[.<k>]`` (no longer a checkpoint; kept for
    inspection); returns the new path."""
    directory = Path(directory)
    target = directory.with_name(f"{directory.name}.{suffix}")
    number = 1
    while target.exists():
        number += 1
        target = directory.with_name(f"{directory.name}.{suffix}.{number}")
    directory.rename(target)
    return target


def read_state(directory: str | Path) -> dict[str, Any]:
    """``state.json`` of a checkpoint: ``{"step": N, "state": <caller's state>}``."""
    loaded = json.loads((Path(directory) / "state.json").read_text())
    return dict(loaded)


def save_checkpoint(
    root: str | Path, step: int, actor: Actor, state: dict[str, Any] | None = None, *, keep_last: int | None = None
) -> Path:
    """Write ``<root>/step_<step>`` atomically and prune to the newest ``keep_last``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    if final.exists():
        raise FileExistsError(f"{final} already exists; steps are saved once.")
    staging = root / f".tmp-step_{step:06d}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _write(staging, step, actor, state or {})
        staging.rename(final)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        needed, free = checkpoint_bytes(actor), shutil.disk_usage(root).free
        if _is_disk_full(exc) or (isinstance(exc, (OSError, RuntimeError)) and free < needed):
            newest = latest_checkpoint(root)
            raise CheckpointSpaceError(space_message(
                root, free, f"a checkpoint needs about {needed / 2**20:.0f} MB", f"step {step} was not saved", newest
            )) from exc
        raise
    if keep_last is not None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}.")
        for old in checkpoint_dirs(root)[:-keep_last]:
            shutil.rmtree(old)
    return final


class CheckpointSpaceError(OSError):
    """A checkpoint could not be written for lack of disk space (nothing else was lost)."""


def space_message(root: Path, free: int, needed: str, lost: str, intact: Path | None) -> str:
    """What a save that ran out of disk says (either engine): where, what is free, what a
    checkpoint takes (``needed``), what was not saved (``lost``) and which one is intact."""
    return (
        f"no space left on {root}: {free / 2**20:.0f} MB free, {needed}; {lost}"
        + (f" ({intact.name} is intact)" if intact else "")
        + ". Free space there (trainer.max_checkpoints_to_keep keeps fewer) or point "
        "trainer.default_local_dir at a larger disk, then rerun the same command to resume"
    )


def checkpoint_bytes(actor: Actor) -> int:
    """About what one checkpoint of ``actor`` takes on disk: the weights it saves (the adapter
    alone for LoRA) and every optimizer state tensor."""
    weights = actor.model.parameters() if not actor.uses_lora else (p for p in actor.model.parameters() if p.requires_grad)
    total = sum(p.numel() * p.element_size() for p in weights)
    for per_parameter in actor.optimizer.state.values():
        total += sum(t.numel() * t.element_size() for t in per_parameter.values() if torch.is_tensor(t))
    return int(total)


def _is_disk_full(exc: BaseException) -> bool:
    """ENOSPC/EDQUOT from Python, or torch's writer failing (it reports no errno)."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(exc, RuntimeError) and "No space left on device" in str(exc)


def _write(directory: Path, step: int, actor: Actor, state: dict[str, Any]) -> None:
    directory.mkdir(parents=True)
    if actor.uses_lora:
        actor.model.save_pretrained(directory / "adapter")
    else:
        from safetensors.torch import save_file

        (directory / "model").mkdir()
        tensors = {name: t.detach().contiguous() for name, t in actor.model.state_dict().items()}
        save_file(_untie(tensors), directory / "model" / "model.safetensors")
    torch.save(
        {"optimizer": actor.optimizer.state_dict(), "scheduler": actor.scheduler.state_dict()},
        directory / "optim.pt",
    )
    torch.save(
        {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
        directory / "rng.pt",
    )
    (directory / "state.json").write_text(json.dumps({"step": step, "state": state}, indent=2))


def _untie(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses shared storage (tied embeddings): store each tensor on its own."""
    seen: set[int] = set()
    out = {}
    for name, tensor in tensors.items():
        pointer = tensor.data_ptr()
        out[name] = tensor.clone() if pointer in seen else tensor
        seen.add(pointer)
    return out


def load_checkpoint(directory: str | Path, actor: Actor) -> dict[str, Any]:
    """Restore weights, optimizer, schedule and RNG into ``actor``; returns ``state.json``.

    Raises:
        FileNotFoundError: the directory is not a complete checkpoint (names what is missing).
        ValueError: a LoRA checkpoint into a full-parameter actor or the reverse.
    """
    directory = Path(directory)
    kind = "adapter" if (directory / "adapter").is_dir() else "model"
    missing = [n for n in (kind, "optim.pt", "rng.pt", "state.json") if not (directory / n).exists()]
    if missing:
        raise FileNotFoundError(f"{directory} is not a complete checkpoint: missing {missing}.")
    if (kind == "adapter") != actor.uses_lora:
        raise ValueError(
            f"{directory} holds {'a LoRA adapter' if kind == 'adapter' else 'full weights'} but the "
            f"actor trains {'LoRA' if actor.uses_lora else 'all parameters'}; match lora_rank to the run."
        )
    from safetensors.torch import load_file

    if kind == "adapter":
        from peft import set_peft_model_state_dict

        weights = load_file(directory / "adapter" / "adapter_model.safetensors")
        result = set_peft_model_state_dict(actor.model, weights)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ValueError(f"The adapter in {directory} has weights this model lacks: {unexpected[:5]}.")
    else:
        actor.model.load_state_dict(load_file(directory / "model" / "model.safetensors"), strict=True)
    try:
        optim = torch.load(directory / "optim.pt", weights_only=False)
        rng = torch.load(directory / "rng.pt", weights_only=False)
    except (RuntimeError, EOFError, OSError) as exc:
        raise ValueError(f"{directory} is not a readable checkpoint: {exc}") from exc
    actor.optimizer.load_state_dict(optim["optimizer"])
    actor.scheduler.load_state_dict(optim["scheduler"])
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    return dict(json.loads((directory / "state.json").read_text()))
