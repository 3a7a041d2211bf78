"""verl on the CPU: a device platform registered through verl's platform registry.

``trainer.engine=verl trainer.device=cpu`` runs verl's own trainer loop on this machine's
CPU: its FSDP2 actor on gloo, the rollout on ``omni_local`` (:mod:`omni_verl_cpu.rollout`). verl
picks its device through ``verl.plugin.platform`` (``VERL_PLATFORM`` names the platform in
every process); this module registers ``cpu`` there, on import, before any verl code asks
for a device.

Ray placement: verl's resource pools reserve one accelerator slot per rank, in Ray's ``GPU``
resource, and check the cluster has enough of them. On the CPU those slots are logical: the
local Ray starts with ``num_gpus`` = the ranks per node (the launcher's to set), Ray is
told not to set ``CUDA_VISIBLE_DEVICES`` from them, and nothing here ever calls CUDA. A
rank is one process with ``torch`` threads of its own; the slots only count ranks.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

from omni_verl_cpu import PLATFORM

RANK_SLOT_RESOURCE = "GPU"
"""The Ray resource verl's placement groups reserve per rank (a logical count on the CPU)."""
NOSET_VISIBLE_DEVICES = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"


class CpuDeviceModule(types.SimpleNamespace):
    """The ``torch.cuda``-shaped namespace verl calls through ``get_torch_device()``:
    memory queries report 0, seeds go to torch's CPU generator, the rest does nothing."""

    def is_available(self) -> bool:
        return True

    def current_device(self) -> str:
        return PLATFORM

    def device_count(self) -> int:
        return 1

    def get_device_name(self, device: Any = None) -> str:
        return "CPU"  # verl's FLOPs table has no CPU entry: MFU reads 0

    def set_device(self, index: Any) -> None:
        return None

    def synchronize(self, device: Any = None) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

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


@PlatformRegistry.register(PLATFORM)
class CpuPlatform(PlatformBase):
    """torch's CPU device and the gloo backend, for every verl process of a CPU run."""

    device_module_impl = CpuDeviceModule()

    @property
    def device_name(self) -> str:
        return PLATFORM

    @property
    def vendor_name(self) -> str:
        return PLATFORM

    @property
    def device_module(self) -> Any:
        return self.device_module_impl

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: a CPU run names this platform in VERL_PLATFORM.
        return False

    def current_device(self) -> Any:
        # verl moves tensors with .to(current_device()); an index would mean cuda:<index>.
        return PLATFORM

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
        return RANK_SLOT_RESOURCE

    def ray_noset_envvars(self) -> list[str]:
        return [NOSET_VISIBLE_DEVICES]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def use_cpu_platform() -> None:
    """Make this process's verl platform the CPU one (before verl code asks for a device)."""
    from verl.plugin.platform import set_platform

    set_platform(CpuPlatform())
