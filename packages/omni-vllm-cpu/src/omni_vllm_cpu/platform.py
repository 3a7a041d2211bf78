"""The CPU omni platform: vLLM's ``CpuPlatform`` with vLLM-Omni's omni interface.

Everything device-shaped comes from vLLM's CPU platform (dtype support, attention backend,
config checks, gloo); what vLLM-Omni adds is answered for a CPU: its stage workers
(:mod:`omni_vllm_cpu.workers`), ``torch.device("cpu")``, no-op synchronisation, and memory
from the operating system (the host's memory is the device's).
"""

from __future__ import annotations

import psutil
import torch
from vllm.platforms.cpu import CpuPlatform
from vllm_omni.platforms.interface import OmniPlatform, OmniPlatformEnum

AR_WORKER = "omni_vllm_cpu.workers.CpuARWorker"
GENERATION_WORKER = "omni_vllm_cpu.workers.CpuGenerationWorker"
SDPA_BACKEND = "TORCH_SDPA"


class CpuOmniPlatform(OmniPlatform, CpuPlatform):
    """vLLM-Omni's platform interface on vLLM's CPU platform (an out-of-tree omni platform)."""

    _omni_enum = OmniPlatformEnum.OOT

    @classmethod
    def get_omni_ar_worker_cls(cls) -> str:
        return AR_WORKER

    @classmethod
    def get_omni_generation_worker_cls(cls) -> str:
        return GENERATION_WORKER

    @classmethod
    def get_default_stage_config_path(cls) -> str:
        return "vllm_omni/deploy"  # the CUDA platform's: the deploy configs are device-neutral

    @classmethod
    def get_diffusion_attn_backend_cls(
        cls, selected_backend: str | None, head_size: int, allow_trtllm_default: bool = False
    ) -> str:
        from vllm_omni.diffusion.attention.backends.registry import DiffusionAttentionBackendEnum

        name = (selected_backend or SDPA_BACKEND).upper()
        cls.validate_diffusion_attn_backend(name)
        return DiffusionAttentionBackendEnum[name].get_path()

    @classmethod
    def supports_torch_inductor(cls) -> bool:
        return False  # stages run eager on the CPU (vLLM's CPU platform compiles nothing for them)

    @classmethod
    def supports_talker_mtp_graph_capture(cls) -> bool:
        return False

    @classmethod
    def get_torch_device(cls, local_rank: int | None = None) -> torch.device:
        return torch.device("cpu")

    @classmethod
    def get_device_count(cls) -> int:
        return 1

    @classmethod
    def get_device_version(cls) -> str | None:
        return None

    @classmethod
    def synchronize(cls) -> None:
        return None

    @classmethod
    def get_free_memory(cls, device: torch.device | None = None) -> int:
        return int(psutil.virtual_memory().available)

    @classmethod
    def get_device_memory(cls, device: torch.device | None = None) -> tuple[int, int]:
        memory = psutil.virtual_memory()
        return int(memory.available), int(memory.total)
