"""The CPU omni platform is what vLLM-Omni resolves where vLLM is its CPU build, through the
``vllm_omni.platform_plugins`` entry point, and it names stage workers built on vLLM's CPU
worker and runner."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

pytest.importorskip("vllm_omni", reason="needs the cpu-rollout extra (uv sync --extra cpu-rollout)")
if importlib.util.find_spec("omni_vllm_cpu") is None:
    pytest.skip("needs the cpu-rollout extra (uv sync --extra cpu-rollout)", allow_module_level=True)


def test_the_entry_point_activates_the_cpu_platform_on_the_cpu_build() -> None:
    from importlib.metadata import entry_points

    from omni_vllm_cpu.plugin import PLATFORM_QUALNAME, cpu_platform

    (entry,) = [e for e in entry_points(group="vllm_omni.platform_plugins") if e.value.startswith("omni_vllm_cpu")]
    assert entry.load() is cpu_platform
    assert cpu_platform() == PLATFORM_QUALNAME


def test_vllm_omni_resolves_the_cpu_platform_and_its_workers() -> None:
    script = (
        "from vllm_omni.platforms import current_omni_platform as p\n"
        "from vllm.utils.import_utils import resolve_obj_by_qualname as r\n"
        "print(type(p).__name__, p.device_type, p.dist_backend, p.get_torch_device(3), p.is_out_of_tree())\n"
        "ar, gen = r(p.get_omni_ar_worker_cls()), r(p.get_omni_generation_worker_cls())\n"
        "print(' '.join(c.__name__ for c in ar.model_runner_cls.__mro__[:6]))\n"
        "print(' '.join(c.__name__ for c in gen.__mro__[:4]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    platform, runner_mro, worker_mro = done.stdout.strip().splitlines()[-3:]
    assert platform.split() == ["CpuOmniPlatform", "cpu", "gloo", "cpu", "True"]
    assert runner_mro.split()[:3] == ["CpuARModelRunner", "_EagerTalkerMtp", "GPUARModelRunner"]
    from omni_vllm_cpu.workers import CpuARModelRunner, CpuGenerationModelRunner

    # vLLM-Omni's hooks first, then vLLM's CPU runner's overrides, then vLLM's shared runner; both
    # runners size their talker-MTP buffers with the eager capture size (code2wav's runs it too).
    for runner in (CpuARModelRunner, CpuGenerationModelRunner):
        mro = [c.__name__ for c in runner.__mro__]
        assert mro.index("_EagerTalkerMtp") < mro.index("OmniGPUModelRunner") < mro.index("CPUModelRunner")
        assert mro.index("CPUModelRunner") < mro.index("GPUModelRunner")
    assert worker_mro.split()[:4] == ["CpuGenerationWorker", "_CpuStageWorker", "OmniWorkerMixin", "CPUWorker"]


def test_memory_is_the_hosts() -> None:
    import psutil

    from omni_vllm_cpu.platform import CpuOmniPlatform

    free, total = CpuOmniPlatform.get_device_memory()
    assert 0 < free <= total == psutil.virtual_memory().total
