"""vLLM-Omni on vLLM's CPU build (the ``cpu-rollout`` extra).

vLLM-Omni 0.28 ships omni platforms for CUDA, ROCm, NPU, XPU and MUSA only; on a CPU it
resolves to ``UnspecifiedOmniPlatform``, which has no stage workers. This package adds the
CPU one through vLLM-Omni's own extension point, the ``vllm_omni.platform_plugins`` entry-point
group (:mod:`omni_vllm_cpu.plugin`): a platform (:mod:`omni_vllm_cpu.platform`) whose stage
workers are vLLM's CPU worker and runner under vLLM-Omni's omni hooks
(:mod:`omni_vllm_cpu.workers`). What vLLM-Omni or vLLM assume about a GPU that does not hold on
the CPU is worked around in :mod:`omni_vllm_cpu.compat`, one function per assumption.

The package is installed only with ``vllm-cpu``; nothing imports it on a GPU install.
"""
