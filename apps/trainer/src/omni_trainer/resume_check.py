"""What changed since the run being resumed was saved: its settings and its training data.

A run directory keeps the config it was started with (``config.yaml``, resolved) and its
data's fingerprint (``data_fingerprint.json``: each train and validation file's size and
SHA-256). Resuming compares this run's config and data with the saved ones:

- Keys in :data:`FREE_TO_CHANGE` (how long to train, how often to save and validate, logging,
  naming, where it runs) may change; the changes are printed.
- Any other difference (a setting, a data file's content) is listed and refused (exit 2)
  unless ``trainer.resume_anyway=true``; then the earlier ``config.yaml`` and fingerprint are
  kept as ``config.before_step_<N>.yaml`` / ``data_fingerprint.before_step_<N>.json`` and
  this run's are written. A saved config is never overwritten silently.
- Data files are compared by content, not by path: the same file under another path is no
  change. The model (``actor_rollout_ref.model.path`` and the LoRA shape) is the checkpoint
  identity's check (:func:`omni_trainer.run_dir.run_identity`), not this one's.
- Keys a saved config lacks (added by a later version) are not compared.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from omni_trainer.config import Config, ConfigError, to_yaml

CONFIG_FILE = "config.yaml"
DATA_FILE = "data_fingerprint.json"
DATA_KEYS = ("data.train_files", "data.val_files")
"""Compared by content (:func:`data_fingerprint`), not as config values."""
MODEL_IDENTITY_PREFIX = "actor_rollout_ref.model."
MODEL_IDENTITY_KEYS = ("path", "stage", "lora_rank", "lora_alpha", "target_modules", "exclude_modules")
"""Compared by the checkpoint's identity check (run_dir), so not listed twice here."""
FREE_TO_CHANGE = (
    "trainer.total_training_steps", "trainer.total_epochs", "trainer.save_freq", "trainer.test_freq",
    "trainer.val_before_train", "trainer.log_val_generations", "trainer.max_checkpoints_to_keep", "trainer.logger",
    "trainer.project_name",
    "trainer.experiment_name", "trainer.default_local_dir", "trainer.resume_mode", "trainer.resume_from_path",
    "trainer.resume_anyway", "trainer.nnodes", "trainer.n_gpus_per_node", "reward.num_workers",
    "reward.max_error_rate", "ray_kwargs.",
)
"""Keys (or key prefixes, ending in ``.``) that do not change what the resumed steps train on."""
_HASH_CHUNK = 1 << 20


@dataclass
class ResumeChanges:
    """The differences between a saved run and this one, as ``key: old -> new`` lines."""

    free: list[str] = field(default_factory=list)
    guarded: list[str] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(self.free or self.guarded)


def flat_config(config: Config | DictConfig) -> dict[str, Any]:
    """``{dotted key: value}`` of a config, after a YAML round trip (as ``config.yaml`` holds it)."""
    node = OmegaConf.create(to_yaml(config)) if isinstance(config, Config) else config
    container = OmegaConf.to_container(node, resolve=True)
    assert isinstance(container, dict)
    return dict(_flatten({str(key): value for key, value in container.items()}))


def _flatten(node: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in node.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            items.extend(_flatten(value, dotted + "."))
        else:
            items.append((dotted, value))
    return items


def data_fingerprint(config: Config) -> dict[str, list[dict[str, Any]]]:
    """Each data file's path, size and SHA-256, per key (``[]`` for the built-in task)."""
    data = config.data
    return {key: [_file_fingerprint(Path(p)) for p in (files or [])]
            for key, files in (("data.train_files", data.train_files), ("data.val_files", data.val_files))}


def _file_fingerprint(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with path.expanduser().open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return {"path": os.path.abspath(path.expanduser()), "bytes": path.expanduser().stat().st_size,
            "sha256": digest.hexdigest()}


def changes_since(saved_dir: Path, config: Config, fingerprint: Mapping[str, Any]) -> ResumeChanges:
    """How ``config`` and its data (``fingerprint``) differ from what ``saved_dir`` was saved with
    (nothing when it holds no ``config.yaml``)."""
    changes = ResumeChanges()
    saved_path = saved_dir / CONFIG_FILE
    if not saved_path.is_file():
        return changes
    try:
        saved_node = OmegaConf.load(saved_path)
    except Exception as exc:  # an unreadable config.yaml: say so, never guess
        changes.guarded.append(f"{saved_path} cannot be read ({type(exc).__name__}: {exc})")
        return changes
    assert isinstance(saved_node, DictConfig)
    saved, current = flat_config(saved_node), flat_config(config)
    for key in sorted(saved.keys() & current.keys()):
        if key in DATA_KEYS or _is_model_identity(key) or saved[key] == current[key]:
            continue
        line = f"{key}: {_show(saved[key])} -> {_show(current[key])}"
        (changes.free if _free(key) else changes.guarded).append(line)
    changes.guarded.extend(_data_changes(saved_dir / DATA_FILE, fingerprint))
    return changes


def _data_changes(saved_file: Path, current: Mapping[str, Any]) -> list[str]:
    if not saved_file.is_file():
        return []
    try:
        saved = json.loads(saved_file.read_text())
    except (OSError, ValueError) as exc:
        return [f"{saved_file} cannot be read ({exc})"]
    lines = []
    for key in DATA_KEYS:
        before, after = saved.get(key, []), current.get(key, [])
        if [f["sha256"] for f in before] != [f["sha256"] for f in after]:
            lines.append(f"{key} (content): {_show_files(before)} -> {_show_files(after)}")
    return lines


def _show_files(files: list[dict[str, Any]]) -> str:
    if not files:
        return "none (the built-in task)"
    return ", ".join(f"{f['path']} ({f['bytes']:,} bytes, sha256 {f['sha256'][:12]})" for f in files)


def _show(value: Any) -> str:
    return "(unset)" if value is None else json.dumps(value) if isinstance(value, list | dict | str) else str(value)


def _free(key: str) -> bool:
    return any(key == free or (free.endswith(".") and key.startswith(free)) for free in FREE_TO_CHANGE)


def _is_model_identity(key: str) -> bool:
    return key.startswith(MODEL_IDENTITY_PREFIX) and key[len(MODEL_IDENTITY_PREFIX):] in MODEL_IDENTITY_KEYS


def check_resume(config: Config, saved_dir: Path, step: int, fingerprint: Mapping[str, Any]) -> ResumeChanges:
    """The changes since ``saved_dir``'s run was saved, when resuming it at ``step``.

    Raises:
        ConfigError: a setting or data file differs and ``trainer.resume_anyway`` is false.
    """
    changes = changes_since(saved_dir, config, fingerprint)
    if changes.guarded and not config.trainer.resume_anyway:
        listed = "\n      ".join([*changes.guarded, *changes.free])
        raise ConfigError(
            f"Invalid configuration:\n  - resuming the run in {saved_dir} at step {step} with other settings or "
            f"data than it was saved with ({saved_dir / CONFIG_FILE}; saved -> this command):\n      {listed}\n"
            "    Run the same command as before to resume it; add trainer.resume_anyway=true to resume with these "
            f"changes (the earlier config is kept as config.before_step_{step}.yaml); or start a new run: another "
            "trainer.experiment_name, or trainer.resume_mode=disable (moves this one aside)"
        )
    return changes


def resume_notes(changes: ResumeChanges, step: int) -> list[str]:
    """What to print when a run resumes with ``changes``."""
    if not changes.any:
        return []
    kind = "settings or data" if changes.guarded else "settings"
    return [f"resuming at step {step} with changed {kind} (trainer.resume_anyway=true)" if changes.guarded
            else f"resuming at step {step} with changed {kind}:",
            *(f"  {line}" for line in [*changes.guarded, *changes.free])]


def record_run(run_dir: Path, config: Config, fingerprint: Mapping[str, Any], *, step: int) -> list[str]:
    """Write ``config.yaml`` and ``data_fingerprint.json`` into ``run_dir`` for a run starting at
    ``step``, keeping earlier ones that differ as ``*.before_step_<step>.*``; returns what was
    kept, for the console."""
    kept: list[str] = []
    files = ((CONFIG_FILE, to_yaml(config)), (DATA_FILE, json.dumps(fingerprint, indent=2, sort_keys=True) + "\n"))
    for name, text in files:
        path = run_dir / name
        if path.is_file():
            if path.read_text() == text:
                continue
            stem, suffix = name.split(".", 1)
            aside = _free_name(run_dir / f"{stem}.before_step_{step}.{suffix}")
            path.rename(aside)
            kept.append(f"the earlier {name} is kept as {aside.name}")
        path.write_text(text)
    return kept


def _free_name(path: Path) -> Path:
    candidate, number = path, 1
    while candidate.exists():
        number += 1
        stem, _, extension = path.name.rpartition(".")
        candidate = path.with_name(f"{stem}.{number}.{extension}")
    return candidate
