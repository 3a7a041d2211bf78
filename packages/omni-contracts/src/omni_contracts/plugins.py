"""Discovery of installed model packages through the ``omni_rl.models`` entry-point group.

A model package declares, in its ``pyproject.toml``::

    [project.entry-points."omni_rl.models"]
    qwen3 = "omni_qwen3.adapters"

Loading the entry point imports that module, whose adapter classes register themselves
with their class decorators. Packages are loaded lazily (on the first registry miss) and
once; a package that fails to import is reported with its error, never skipped.
"""

from __future__ import annotations

import importlib.metadata
import threading
import traceback
from dataclasses import dataclass

from omni_contracts.errors import ModelPackageImportError

MODEL_ENTRY_POINT_GROUP = "omni_rl.models"


@dataclass(frozen=True)
class ModelPackage:
    """One installed entry point of the model group."""

    name: str
    value: str
    distribution: str | None

    def describe(self) -> str:
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
        """The entry points installed in this environment, sorted by name."""
        found = importlib.metadata.entry_points(group=self.group)
        packages = [
            ModelPackage(ep.name, ep.value, ep.dist.name if ep.dist is not None else None)
            for ep in found
        ]
        return sorted(packages, key=lambda package: package.name)

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
        for ep in sorted(importlib.metadata.entry_points(group=self.group), key=lambda e: e.name):
            try:
                ep.load()
            except Exception as exc:  # any import-time error of a third-party package
                first_cause = first_cause or exc
                last_frame = traceback.format_exception_only(type(exc), exc)[-1].strip()
                failures.append(f"  - {ep.name} = {ep.value}: {last_frame}")
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
