"""vLLM-Omni's stage workers on the CPU: vLLM's ``CPUWorker`` under vLLM-Omni's worker mixin,
running vLLM-Omni's model runners with vLLM's ``CPUModelRunner`` below them.

Each runner lists vLLM-Omni's runner first and ``CPUModelRunner`` second, so method resolution
goes vLLM-Omni's runner -> vLLM-Omni's base runner -> ``CPUModelRunner`` -> ``GPUModelRunner``:
the omni hooks wrap the CPU runner's overrides (CPU buffers in place of device ones, no CUDA
graphs, its Triton fallbacks), which wrap vLLM's shared runner. ``CPUWorker`` builds a plain
``CPUModelRunner`` in ``init_device``; the workers replace it with theirs, as vLLM-Omni's XPU
workers do on ``XPUWorker``.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.v1.worker.cpu_worker import CPUWorker
from vllm_omni.worker.gpu_ar_model_runner import GPUARModelRunner
from vllm_omni.worker.gpu_generation_model_runner import GPUGenerationModelRunner
from vllm_omni.worker.mixins import OmniWorkerMixin

from omni_vllm_cpu import compat


class _EagerTalkerMtp:
    """Both of vLLM-Omni's runners size talker-MTP buffers in ``load_model``, every stage's."""

    compilation_config: Any

    def _init_talker_mtp(self) -> None:
        compat.set_eager_cudagraph_capture_size(self.compilation_config)
        super()._init_talker_mtp()  # type: ignore[misc]


class CpuARModelRunner(_EagerTalkerMtp, GPUARModelRunner, CPUModelRunner):
    """vLLM-Omni's autoregressive runner (thinker, talker) on vLLM's CPU runner."""


class CpuGenerationModelRunner(_EagerTalkerMtp, GPUGenerationModelRunner, CPUModelRunner):
    """vLLM-Omni's non-autoregressive runner (code2wav) on vLLM's CPU runner."""


class _CpuStageWorker(OmniWorkerMixin, CPUWorker):
    model_runner_cls: type[CPUModelRunner]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        compat.keep_linear_weights_for_reload()
        compat.prepack_cpu_moe_on_weight_update()
        super().__init__(*args, **kwargs)

    def init_device(self) -> None:
        super().init_device()
        # vLLM-Omni's hooks live in the v1 runner only (its CUDA and XPU workers force it too).
        self.use_v2_model_runner = False
        self.model_runner = self.model_runner_cls(self.vllm_config, torch.device("cpu"))


class CpuARWorker(_CpuStageWorker):
    """The worker of an autoregressive stage."""

    model_runner_cls = CpuARModelRunner


class CpuGenerationWorker(_CpuStageWorker):
    """The worker of a generation stage."""

    model_runner_cls = CpuGenerationModelRunner
