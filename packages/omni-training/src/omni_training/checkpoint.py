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
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if keep_last is not None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}.")
        for old in checkpoint_dirs(root)[:-keep_last]:
            shutil.rmtree(old)
    return final


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
    optim = torch.load(directory / "optim.pt", weights_only=False)
    actor.optimizer.load_state_dict(optim["optimizer"])
    actor.scheduler.load_state_dict(optim["scheduler"])
    rng = torch.load(directory / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    return dict(json.loads((directory / "state.json").read_text()))
