"""The one error a user without the extras sees, naming the command that fixes it."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

EXTRAS_COMMAND = "uv sync --extra distributed --extra gpu"
REQUIRED_MODULES = {"verl": "distributed", "ray": "distributed", "vllm": "gpu", "vllm_omni": "gpu"}


class MissingExtrasError(RuntimeError):
    """verl, Ray, vLLM or vLLM-Omni is not installed."""


class GpuRequiredError(MissingExtrasError):
    """The run checked out, but this machine has no CUDA GPU for verl and vLLM-Omni."""


def require_extras(find_spec: Callable[[str], Any] = importlib.util.find_spec) -> None:
    """Raise :class:`MissingExtrasError` unless every package the verl engine needs imports.

    Checked by ``find_spec`` (nothing is imported): verl alone takes ~25 s to import.
    """
    missing = [name for name in REQUIRED_MODULES if find_spec(name) is None]
    if missing:
        extras = sorted({REQUIRED_MODULES[name] for name in missing})
        raise MissingExtrasError(
            f"trainer.engine=verl needs {', '.join(missing)} (the {' and '.join(extras)} "
            f"extra{'s' if len(extras) > 1 else ''}), which are not installed. Install them with:\n"
            f"    {EXTRAS_COMMAND}\n"
            "or run on one machine with trainer.engine=local."
        )
