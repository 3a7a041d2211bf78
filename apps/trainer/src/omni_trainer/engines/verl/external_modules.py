"""``VERL_USE_EXTERNAL_MODULES`` of a run: omni-rl's module first, then the user's, without
verl-omni's (which omni-rl replaces)."""

from __future__ import annotations

import importlib.util
import os

from omni_verl.settings import EXTERNAL_MODULE

EXTERNAL_MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"
VERL_OMNI_MODULE = "verl_omni"
"""verl-omni's external module, which its launchers export; omni-rl's own takes its place."""


def external_modules(exported: str | None) -> tuple[str, list[str]]:
    """``VERL_USE_EXTERNAL_MODULES`` for a run, given the user's exported value: our module
    first, then each of the user's other modules; verl-omni's (:data:`VERL_OMNI_MODULE`, which
    its launchers export) is not one of them. Returns the value and the notes to print.

    Raises:
        ValueError: a module the user exported is not installed (verl would stop on it in
            every process).
    """
    kept, notes = [EXTERNAL_MODULE], []
    for module in (m.strip() for m in (exported or "").split(",")):
        if not module or module in kept:
            continue
        if module == VERL_OMNI_MODULE or module.startswith(VERL_OMNI_MODULE + "."):
            notes.append(f"{EXTERNAL_MODULES_ENV}={module} (verl-omni's launchers export it) is replaced by omni-rl's "
                         f"own module, {EXTERNAL_MODULE}: verl-omni is not needed")
            continue
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a missing parent package
            found = False
        if not found:
            raise ValueError(f"{EXTERNAL_MODULES_ENV} names {module!r}, which is not installed here; verl imports it "
                             f"in every process. Install it, or drop it from {EXTERNAL_MODULES_ENV} (omni-rl adds "
                             "its own module itself)")
        kept.append(module)
    return ",".join(kept), notes


def adopt_external_modules() -> list[str]:
    """Set this process's ``VERL_USE_EXTERNAL_MODULES`` to the run's (:func:`external_modules`)
    before anything imports verl, which imports them at once; returns the notes to print.

    Raises:
        ValueError: see :func:`external_modules`.
    """
    value, notes = external_modules(os.environ.get(EXTERNAL_MODULES_ENV))
    os.environ[EXTERNAL_MODULES_ENV] = value
    return notes
