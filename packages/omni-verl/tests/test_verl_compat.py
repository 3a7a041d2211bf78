"""Canaries for every private name the verl engine relies on (``engines/verl/compat.py``).

Each test fails when verl, Ray or transformers moves or changes the name under us.
"""

from __future__ import annotations

import inspect
from typing import Any
from types import SimpleNamespace

import pytest

pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed --extra gpu)")

from omni_verl.compat import PRIVATE_OVERRIDES  # noqa: E402  (imports no verl)

pytestmark = pytest.mark.slow


def test_ray_actor_class_unwraps_verls_v1_worker() -> None:
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    from omni_verl.compat import ray_actor_class

    cls = ray_actor_class(AgentLoopWorkerTQ)
    assert isinstance(cls, type) and cls.__name__ == "AgentLoopWorkerTQ"
    assert "_agent_loop_postprocess" in vars(cls)  # the V1 postprocessing we rely on
    with pytest.raises(TypeError, match="not a Ray actor class"):
        ray_actor_class(object)


def test_verls_manager_hook_and_worker_slot_are_where_we_use_them() -> None:
    """``agent_loop_manager_class`` is read by the V1 task runner, and the manager starts
    whatever ``agent_loop_workers_class`` holds after ``__init__``."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.trainer import main_ppo

    assert "agent_loop_manager_class" in inspect.getsource(main_ppo.TaskRunnerV1.init_agent_loop_manager)
    assert "self.agent_loop_workers_class.options(" in inspect.getsource(AgentLoopManager._init_agent_loop_workers)


def test_worker_postprocessing_reads_the_workers_processor() -> None:
    """Why the worker (not the agent loop) must hold our processor: verl's postprocessing
    builds ``multi_modal_inputs`` and ``position_ids`` from ``self.processor``, and asks it for
    ``get_rope_index_kwargs``."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    source = inspect.getsource(AgentLoopWorker._compute_position_ids)
    assert "self.processor.get_rope_index(" in source and "get_rope_index_kwargs" in source
    assert "self.processor" in inspect.getsource(AgentLoopWorker._compute_multi_modal_inputs)


def test_register_worker_rollout_reaches_verls_lookup() -> None:
    from verl.workers.rollout.base import get_rollout_class

    from omni_verl.compat import register_worker_rollout

    register_worker_rollout("omni_rl_canary", "async", "verl.workers.rollout.vllm_rollout.ServerAdapter")
    assert get_rollout_class("omni_rl_canary", "async").__name__ == "ServerAdapter"


def test_auto_class_mapping_answers_for_qwen3_omni() -> None:
    import transformers
    from transformers import Qwen3OmniMoeConfig

    from omni_verl.compat import auto_class_owns, model_class_for

    auto = transformers.AutoModelForMultimodalLM
    assert auto_class_owns(auto, Qwen3OmniMoeConfig)
    assert model_class_for(auto, Qwen3OmniMoeConfig).__name__ == "Qwen3OmniMoeForConditionalGeneration"
    assert not auto_class_owns(transformers.AutoModelForCausalLM, Qwen3OmniMoeConfig)


def test_as_language_model_presents_verls_loader_type_and_restores() -> None:
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    from omni_verl.compat import VERL_LANGUAGE_MODEL, as_language_model

    assert f'self.model_config.model_type == "{VERL_LANGUAGE_MODEL}"' in inspect.getsource(FSDPEngine._build_module)
    config = SimpleNamespace(model_type="omni_language_model")
    with as_language_model(config):
        assert config.model_type == VERL_LANGUAGE_MODEL
    assert config.model_type == "omni_language_model"


def test_our_manager_starts_our_v1_workers() -> None:
    """verl's V1 task runner loads ``OmniAgentLoopManager`` by name; the workers it starts are
    verl's TransferQueue workers with the adapter's processor installed."""
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.utils.import_utils import load_class_from_fqn

    from omni_verl.agent_loop import AdapterProcessorMixin
    from omni_verl.compat import ray_actor_class
    from omni_verl.settings import AGENT_LOOP_MANAGER

    manager_cls = load_class_from_fqn(AGENT_LOOP_MANAGER, "AgentLoopManager")
    rollout = SimpleNamespace()
    config = SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=rollout, model=SimpleNamespace()))
    manager = manager_cls(config=config, llm_client=None)
    worker_cls = ray_actor_class(manager.agent_loop_workers_class)
    assert issubclass(worker_cls, AdapterProcessorMixin)
    assert issubclass(worker_cls, ray_actor_class(AgentLoopWorkerTQ))
    # The mixin wraps verl's __init__: verl's setup runs in full, then the processor is replaced.
    assert worker_cls.__mro__.index(AdapterProcessorMixin) < worker_cls.__mro__.index(ray_actor_class(AgentLoopWorkerTQ))


def test_reserve_server_port_sets_what_verls_server_reports() -> None:
    """verl's vLLM server reports ``_server_address``/``_server_port`` (its load balancer keys
    replicas by ``ip:port``); ours serves no HTTP app, so compat reserves a port for it."""
    from typing import Any

    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

    from omni_verl.compat import reserve_server_port

    assert "return self._server_address, self._server_port" in inspect.getsource(vLLMHttpServer.get_server_address)
    init = inspect.getsource(vLLMHttpServer.__init__)
    assert "self._server_address = " in init and "self._server_port = None" in init
    server: Any = object.__new__(vLLMHttpServer)
    server._server_address = "127.0.0.1"
    reserve_server_port(server)
    try:
        address, port = vLLMHttpServer.get_server_address(server)
        assert address == "127.0.0.1" and isinstance(port, int) and port > 0
    finally:
        server._port_reservation.close()


def test_verls_server_calls_on_its_engine_only_what_the_vllm_omni_driver_provides() -> None:
    """Every ``self.engine.<name>`` in verl's vLLM server resolves on ``VllmOmniDriver``, except
    in the one method we override (``abort_request`` reaches into vLLM's output processor and
    engine core). A new call in a verl upgrade fails here instead of on a GPU."""
    import re

    from verl.workers.rollout.vllm_rollout import vllm_async_server

    from omni_rollout.vllm_omni import VllmOmniDriver
    from omni_verl.rollout import VllmOmniHttpServer

    server = vllm_async_server.vLLMHttpServer
    used: dict[str, set[str]] = {}
    for name, method in vars(server).items():
        if callable(method) and name != "abort_request":
            for called in re.findall(r"self\.engine\.(\w+(?:\.\w+)?)", inspect.getsource(method)):
                used.setdefault(called, set()).add(name)
    assert "abort_request" in vars(VllmOmniHttpServer)  # ours goes through the driver
    assert used, "verl's server no longer calls self.engine: re-check the driver's surface"
    attributes = {**vars(VllmOmniDriver), "output_processor": None}
    missing = {called: callers for called, callers in used.items() if called.split(".")[0] not in attributes}
    assert not missing, f"verl's vLLM server calls these on self.engine; VllmOmniDriver lacks them: {missing}"
    assert {c for c in used if c.startswith("output_processor")} == {"output_processor.request_states"}


def test_verls_runtime_imports_resolve_in_the_locked_environment() -> None:
    """What verl's trainer imports when it runs (not only what its package imports): its V1
    task runner imports TransferQueue, which verl declares only under its ``verl-core`` extra."""
    import importlib

    for module in (
        "transfer_queue",
        "verl.trainer.main_ppo",
        "verl.trainer.ppo.v1",
        "verl.trainer.ppo.v1.agent_loop_tq",
        "verl.workers.engine_workers",
        "verl.workers.engine.fsdp.transformer_impl",
        "verl.workers.rollout.vllm_rollout.vllm_async_server",
        "omni_verl.external",
        "omni_verl.agent_loop",
        "omni_verl.rollout",
    ):
        importlib.import_module(module)


def test_verl_still_names_the_cpu_device_twice_in_its_process_group_backend() -> None:
    """``gloo_process_group_on_cpu`` exists because verl's default backend names the CPU twice
    on the CPU platform, which torch refuses; it wraps the name verl's workers call."""
    from torch.distributed.distributed_c10d import BackendConfig
    from verl.utils import distributed
    from verl.workers import engine_workers

    source = inspect.getsource(distributed.initialize_global_process_group_ray)
    assert 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in source
    assert list(inspect.signature(distributed.initialize_global_process_group_ray).parameters) == ["timeout_second", "backend"]
    assert "initialize_global_process_group_ray(timeout_second=None)" in inspect.getsource(engine_workers.TrainingWorker.__init__)
    with pytest.raises(ValueError, match="Duplicate device type cpu"):
        BackendConfig("cpu:gloo,cpu:gloo")
    BackendConfig("cpu:gloo")  # what the wrapper passes


def test_gloo_process_group_on_cpu_wraps_once_and_passes_cpu_gloo(monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.workers import engine_workers

    from omni_verl.compat import CPU_BACKEND, gloo_process_group_on_cpu

    calls: list[tuple[Any, Any]] = []
    monkeypatch.setattr(engine_workers, "initialize_global_process_group_ray", lambda timeout_second=None, backend=None: calls.append((timeout_second, backend)))
    gloo_process_group_on_cpu()
    gloo_process_group_on_cpu()  # idempotent: one wrapper
    engine_workers.initialize_global_process_group_ray(timeout_second=None)
    assert calls == [(None, CPU_BACKEND)]


def test_accelerates_empty_weights_still_fail_under_transformers_5() -> None:
    """accelerate 1.12 (vLLM-Omni 0.28 pins it) passes a parameter's attributes to its
    constructor; transformers 5 sets ``_is_hf_initialized`` on them (huggingface/transformers#44291).
    When this stops raising, ``empty_weights_for_transformers`` can go."""
    import torch
    from accelerate import init_empty_weights

    class Holder(torch.nn.Module):
        pass

    param = torch.nn.Parameter(torch.ones(2))
    param._is_hf_initialized = True  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="_is_hf_initialized"), init_empty_weights():
        Holder().register_parameter("weight", param)


def test_empty_weights_for_transformers_swaps_only_accelerates_context() -> None:
    import torch
    from accelerate import init_empty_weights
    from verl.workers.engine.fsdp import transformer_impl

    from omni_verl.compat import empty_weights, empty_weights_for_transformers

    choose = transformer_impl.get_init_weight_context_manager
    assert list(inspect.signature(choose).parameters) == ["use_meta_tensor", "mesh"]
    assert "get_init_weight_context_manager(" in inspect.getsource(transformer_impl.FSDPEngine._build_module)
    with empty_weights_for_transformers():
        assert transformer_impl.get_init_weight_context_manager(use_meta_tensor=False) is not init_empty_weights
    assert transformer_impl.get_init_weight_context_manager is choose

    class Holder(torch.nn.Module):
        pass

    param = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    param._is_hf_initialized = True  # type: ignore[attr-defined]
    holder = Holder()
    with empty_weights():
        holder.register_parameter("weight", param)
    assert holder.weight.is_meta and holder.weight._is_hf_initialized and not holder.weight.requires_grad


def test_verls_position_fix_still_breaks_rows_of_one_length() -> None:
    """``equal_length_position_ids`` exists because this raises (a rank's rows all one length);
    when it stops raising, verl fixed it."""
    import torch
    from verl.utils import tensordict_utils as tu
    from verl.workers import engine_workers
    from verl.workers.engine import base

    from tensordict import TensorDict

    assert "maybe_fix_3d_position_ids" in vars(engine_workers) and "maybe_fix_3d_position_ids" in vars(base)
    rows = [torch.arange(4 * 37).reshape(4, 37) + 1000 * i for i in range(2)]  # [4, L] mrope rows, one length
    batch = TensorDict({"position_ids": torch.nested.as_nested_tensor(rows, layout=torch.jagged)}, batch_size=[2])
    tu.maybe_fix_3d_position_ids(batch)
    with pytest.raises(RuntimeError, match="split_with_sizes"):
        tu.index_select_tensor_dict(batch, torch.tensor([0, 1]))


@pytest.mark.parametrize("lengths", [(37, 37, 37, 37), (17, 20, 15, 22)])
def test_repaired_positions_keep_every_row_through_verls_chunking_and_selection(lengths: tuple[int, ...]) -> None:
    import pickle

    import torch
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    from omni_verl.compat import repair_3d_position_ids

    rows = [torch.arange(4 * n).reshape(4, n) + 1000 * i for i, n in enumerate(lengths)]
    batch = TensorDict({"position_ids": torch.nested.as_nested_tensor(rows, layout=torch.jagged)}, batch_size=[4])
    for number, chunk in enumerate(tu.chunk_tensordict(batch, 2)):  # verl's dispatch to two ranks
        chunk = pickle.loads(pickle.dumps(chunk))
        repair_3d_position_ids(chunk)
        selected = tu.index_select_tensor_dict(chunk, torch.tensor([1, 0]))
        repair_3d_position_ids(selected)
        got = selected["position_ids"].unbind()
        assert [torch.equal(g, w) for g, w in zip(got, [rows[2 * number + 1], rows[2 * number]], strict=True)] == [True, True]


OUR_VERL_MODULES = (
    *(f"omni_verl.{name}" for name in (
        "agent_loop", "compat", "dataset", "engine", "fully_async", "processor", "reward", "rollout",
    )),
    *(f"omni_verl_cpu.{name}" for name in ("platform", "rollout", "speech", "gloo_checkpoint")),
)


def _class(path: str) -> type:
    import importlib

    module, _, name = path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    if not inspect.isclass(cls):  # a @ray.remote class
        from omni_verl.compat import ray_actor_class

        cls = ray_actor_class(cls)
    return cls


def _parameters(function: Any) -> list[str]:
    return [name for name in inspect.signature(function).parameters if name != "_ray_trace_ctx"]  # Ray's tracing


def test_every_private_verl_method_we_override_is_declared() -> None:
    """Our classes in the verl engine, against the verl classes they derive from: each private
    (non-dunder) method of ours that one of verl's defines is in ``PRIVATE_OVERRIDES``."""
    import importlib

    found = set()
    for module_name in OUR_VERL_MODULES:
        for cls in vars(importlib.import_module(module_name)).values():
            if not inspect.isclass(cls) or cls.__module__ != module_name:
                continue
            mro = inspect.getmro(cls)
            theirs = [k for k in mro if not k.__module__.startswith("omni_") and k is not object]
            for ours in (k for k in mro if k.__module__.startswith("omni_")):
                for name in vars(ours):
                    if not name.startswith("_") or name.startswith("__") or name == "_abc_impl":
                        continue
                    owner = next((k for k in theirs if name in vars(k)), None)
                    if owner is not None:
                        found.add((f"{owner.__module__}.{owner.__qualname__}", name, f"{ours.__module__}.{ours.__qualname__}"))
    assert found == set(PRIVATE_OVERRIDES)


@pytest.mark.parametrize(("upstream", "method", "ours"), PRIVATE_OVERRIDES,
                         ids=[f"{ours.rsplit('.', 1)[1]}.{method}" for _, method, ours in PRIVATE_OVERRIDES])
def test_each_private_method_we_override_still_exists_upstream_with_our_parameters(
    upstream: str, method: str, ours: str
) -> None:
    theirs = vars(_class(upstream)).get(method)
    assert theirs is not None, f"verl's {upstream} no longer defines {method}"
    mine = vars(_class(ours))[method]
    assert inspect.iscoroutinefunction(theirs) == inspect.iscoroutinefunction(mine), (upstream, method)
    assert _parameters(theirs) == _parameters(mine), (upstream, method)
