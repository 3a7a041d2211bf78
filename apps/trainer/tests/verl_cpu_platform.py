"""A CPU platform for verl, so verl's own FSDP engine can run on this machine's CPU.

verl picks its device through its platform plugin registry (``verl.plugin.platform``):
without an accelerator it falls back to CUDA and fails at the first device call. This
registers ``cpu`` (torch's CPU device, the gloo backend) through that documented
extension point; :func:`use_cpu_platform` installs it before verl's engine code runs.
Test-only: the verl engine itself runs on GPUs.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry, set_platform


class _NoCuda(types.SimpleNamespace):
    """What verl reads from ``torch.cuda``-like modules, on the CPU."""

    def __init__(self) -> None:
        super().__init__()

    def is_available(self) -> bool:
        return True

    def current_device(self) -> str:
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, index: int) -> None:
        return None

    def synchronize(self, device: Any = None) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def max_memory_allocated(self, device: Any = None) -> int:
        return 0

    def max_memory_reserved(self, device: Any = None) -> int:
        return 0

    def memory_allocated(self, device: Any = None) -> int:
        return 0

    def memory_reserved(self, device: Any = None) -> int:
        return 0

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        return (0, 0)

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        return None


@PlatformRegistry.register("cpu")
class CpuPlatform(PlatformBase):
    device_module_impl = _NoCuda()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> Any:
        return self.device_module_impl

    def is_available(self) -> bool:
        return True

    def current_device(self) -> Any:
        # verl moves tensors with .to(current_device()); an index would mean cuda:<index>.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return (None, None)

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "CPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def use_cpu_platform() -> None:
    """Make verl's platform the CPU one (before any verl engine code asks for a device)."""
    set_platform(CpuPlatform())
