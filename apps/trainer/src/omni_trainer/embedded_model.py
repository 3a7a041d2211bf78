"""The embedded default's model: the tiny Qwen3-Omni, built offline and cached.

This module is the one place the app names a model package (``omni_qwen3``, the default
model's): every other model is found through its entry point. ``trainer tiny`` builds the
same checkpoints.
"""

from __future__ import annotations

from collections.abc import Sequence

EMBEDDED_MODEL = "tiny Qwen3-Omni"


def embedded_model_path() -> str:
    """The cached build of the embedded default's checkpoint (built on first use, offline)."""
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    return str(build_tiny_qwen3_omni())


def build_tiny_command(argv: Sequence[str]) -> int:
    """``trainer tiny ...``: the default model package's tiny-checkpoint builder."""
    from omni_qwen3.tiny.__main__ import main

    return main(list(argv))
