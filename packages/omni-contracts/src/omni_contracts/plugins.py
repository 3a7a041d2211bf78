"""Discovery of installed model packages through the ``omni_rl.models`` entry-point group.

A model package declares, in its ``pyproject.toml``::

    [project.entry-points."omni_rl.models"]
    qwen3 = "omni_qwen3.adapters"

Loading the entry point imports that module, whose adapter classes register themselves
with their class decorators. Packages are loaded lazily (on the first registry miss) and
once; a package that fails to import is reported with its error, never skipped.

A checkout used without installing it (``PYTHONPATH`` over the ``src`` folders, plain
``python``) has no distribution metadata, so no entry points: name the modules instead in
``OMNI_RL_MODEL_MODULES`` (:data:`MODEL_MODULES_ENV`), comma-separated, e.g.
``OMNI_RL_MODEL_MODULES=omni_qwen3.adapters,omni_qwen25.adapters`` (the values of the
packages' entry points). They load with the installed ones, a module named both ways once.
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
import traceback
from dataclasses import dataclass

from omni_contracts.errors import ModelPackageImportError

MODEL_ENTRY_POINT_GROUP = "omni_rl.models"
MODEL_MODULES_ENV = "OMNI_RL_MODEL_MODULES"
"""Model package modules to load besides the installed entry points of
:data:`MODEL_ENTRY_POINT_GROUP` (comma-separated)."""


@dataclass(frozen=True)
class ModelPackage:
    """One model package: an installed entry point, or a module named in ``OMNI_RL_MODEL_MODULES``."""

    name: str
    value: str
    distribution: str | None
    from_env: bool = False  # named in OMNI_RL_MODEL_MODULES, not by an installed entry point

    def describe(self) -> str:
        if self.from_env:
            return f"{self.value} (from ${MODEL_MODULES_ENV})"
        origin = f" (from {self.distribution})" if self.distribution else ""
        return f"{self.name} = {self.value}{origin}"


class ModelPackageLoader:
    """Finds and imports the model packages of one entry-point group, once."""

    def __init__(self, group: str = MODEL_ENTRY_POINT_GROUP) -> None:
        self.group = group
        self._lock = threading.Lock()
        self._loaded = False
        self._failure: ModelPackageImportError | None = None

    def installed(self) -> list[ModelPackage]:
        """The entry points installed in this environment, sorted by name, then the modules
        named in ``OMNI_RL_MODEL_MODULES`` that no entry point names."""
        return [package for package, _ in self._entry_points()]

    def _entry_points(self) -> list[tuple[ModelPackage, importlib.metadata.EntryPoint]]:
        found = sorted(importlib.metadata.entry_points(group=self.group), key=lambda e: e.name)
        pairs = [(ModelPackage(ep.name, ep.value, ep.dist.name if ep.dist is not None else None), ep) for ep in found]
        named = {ep.module for ep in found}
        listed = os.environ.get(MODEL_MODULES_ENV, "") if self.group == MODEL_ENTRY_POINT_GROUP else ""
        for module in listed.split(","):
            module = module.strip()
            if module and module not in named:
                named.add(module)
                entry = importlib.metadata.EntryPoint(name=module, value=module, group=self.group)
                pairs.append((ModelPackage(module, module, None, from_env=True), entry))
        return pairs

    def load_all(self) -> None:
        """Import every installed model package (first call only).

        Raises:
            ModelPackageImportError: one or more packages failed to import. The message
                names each package, its entry point and the error; the same error is
                raised again on later calls instead of retrying a half-imported package.
        """
        with self._lock:
            if not self._loaded:
                self._loaded = True
                self._failure = self._import_each()
        if self._failure is not None:
            raise self._failure

    def _import_each(self) -> ModelPackageImportError | None:
        failures: list[str] = []
        first_cause: BaseException | None = None
        for package, ep in self._entry_points():
            try:
                ep.load()
            except Exception as exc:  # any import-time error of a third-party package
                first_cause = first_cause or exc
                last_frame = traceback.format_exception_only(type(exc), exc)[-1].strip()
                label = package.describe() if package.from_env else f"{ep.name} = {ep.value}"
                failures.append(f"  - {label}: {last_frame}")
        if not failures:
            return None
        error = ModelPackageImportError(
            f"{len(failures)} installed model package(s) of entry-point group "
            f"'{self.group}' failed to import:\n"
            + "\n".join(failures)
            + "\nFix or uninstall the package; its adapters cannot be registered."
        )
        error.__cause__ = first_cause
        return error


default_loader = ModelPackageLoader()
