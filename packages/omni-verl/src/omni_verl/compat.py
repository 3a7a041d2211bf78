"""Every reliance of the verl engine on a private name of verl, Ray or transformers.

Each function here reaches one name that is not a documented extension point; each has a
canary in ``packages/omni-verl/tests/test_verl_compat.py`` that fails when upstream moves or
changes it. Nothing outside this module touches these names.

- ``ray_actor_class``: Ray's ``__ray_actor_class__`` (the class behind ``@ray.remote``),
  to subclass verl's V1 agent-loop worker and its fully-async task runner, rollouter and trainer.
- ``register_worker_rollout``: verl's ``_ROLLOUT_REGISTRY`` (worker-side rollout lookup
  has no public register function; the replica side has ``RolloutReplicaRegistry``).
- ``auto_class_owns`` / ``model_class_for``: transformers' ``_model_mapping`` of an
  auto class (is a config class loadable by it?).
- ``as_language_model``: verl's FSDP ``_build_module`` loads a causal LM only when the
  model type is ``language_model``; our engine has its own type (verl's registry refuses a
  second ``language_model`` engine).
- ``gloo_process_group_on_cpu``: verl's worker module's ``initialize_global_process_group_ray``
  (it builds the backend ``cpu:gloo,<device>:<backend>``, which torch refuses for the CPU
  device; no verl setting changes it), wrapped on CPU runs only.
- ``empty_weights_for_transformers``: verl's FSDP engine module's ``get_init_weight_context_manager``,
  wrapped while our engine builds its module: accelerate 1.12 (pinned by vLLM-Omni 0.28) cannot
  build empty weights under transformers 5 (huggingface/transformers#44291), which every rank
  but the first uses to load a model with untied embeddings (Qwen3-Omni).
- ``equal_length_position_ids``: verl's ``maybe_fix_3d_position_ids``, as its training worker and
  engine modules import it. torch lays out a batch of mrope ``position_ids`` rows ``[4, L]`` that
  all have one length as ragged along the rope axis; verl's fix then marks the sequence axis
  ragged, and the next ``unbind`` fails (every rank whose rows are one length: n samples of one
  prompt that all reach the response limit). Replaced, in all runs, by :func:`repair_3d_position_ids`.
- ``reserve_server_port``: verl's vLLM server's ``_server_address`` / ``_server_port``
  (``get_server_address`` reports them; verl's load balancer keys replicas by ``ip:port``),
  set without the HTTP app verl would start.
- ``AfterPostprocess``: verl's V1 worker's ``_agent_loop_postprocess`` (scores a trajectory,
  then stores it in TransferQueue), extended to show each finished trajectory to our worker
  (it tallies scorer failures per step for ``reward.max_error_rate``).

Our subclasses of verl's classes also override private methods where verl has no public
hook; :data:`PRIVATE_OVERRIDES` lists each one. A parametrised canary checks that each still
exists upstream with the parameters ours takes, and that the list is complete.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

VERL_LANGUAGE_MODEL = "language_model"

PRIVATE_OVERRIDES: tuple[tuple[str, str, str], ...] = (
    # (verl's class, its private method, our class overriding it), classes by module path.
    # The FSDP engine builds its module in these two; ours loads the adapter's policy class
    # and masks its placeholder logits (verl's engine registry picks the class, not the module).
    ("verl.workers.engine.fsdp.transformer_impl.FSDPEngine", "_build_module",
     "omni_verl.engine.OmniFSDPEngine"),
    ("verl.workers.engine.fsdp.transformer_impl.FSDPEngine", "_build_lora_module",
     "omni_verl.engine.OmniFSDPEngine"),
    # A LoRA run's weight sync: verl's rounds the merged weights to bf16 (an fp32 rollout then
    # samples from other weights than the actor scores) and skips splitting packed MoE experts.
    ("verl.workers.engine.fsdp.transformer_impl.FSDPEngine", "_merged_lora_per_tensor_param",
     "omni_verl.engine.OmniFSDPEngine"),
    # verl's vLLM server, made vLLM-Omni's: its start-up, config checks, sleep level and
    # engine-kwargs key and preprocessing (verl's rollout registry picks the class).
    ("verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer", "_post_init",
     "omni_verl.rollout.VllmOmniHttpServer"),
    ("verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer", "_validate_configs",
     "omni_verl.rollout.VllmOmniHttpServer"),
    ("verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer", "_resolve_sleep_level",
     "omni_verl.rollout.VllmOmniHttpServer"),
    ("verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer", "_get_engine_kwargs_key",
     "omni_verl.rollout.VllmOmniHttpServer"),
    ("verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMHttpServer", "_preprocess_engine_kwargs",
     "omni_verl.rollout.VllmOmniHttpServer"),
    ("verl.workers.rollout.vllm_rollout.vllm_async_server.vLLMReplica", "_get_server_name_prefix",
     "omni_verl.rollout.VllmOmniReplica"),
    ("verl.trainer.ppo.v1.agent_loop_tq.AgentLoopWorkerTQ", "_agent_loop_postprocess",
     "omni_verl.compat.AfterPostprocess"),
    # verl's fully-async trainer names its rollouter, trainer and agent-loop manager classes in
    # these, with no hook: ours start the omni agent-loop workers and check the scorer.
    ("verl.experimental.fully_async_policy.fully_async_main.FullyAsyncTaskRunner", "_create_rollouter",
     "omni_verl.fully_async.OmniFullyAsyncTask"),
    ("verl.experimental.fully_async_policy.fully_async_main.FullyAsyncTaskRunner", "_create_trainer",
     "omni_verl.fully_async.OmniFullyAsyncTask"),
    ("verl.experimental.fully_async_policy.fully_async_rollouter.FullyAsyncRollouter", "_init_async_rollout_manager",
     "omni_verl.fully_async.OmniFullyAsyncRollouter"),
    ("verl.experimental.fully_async_policy.fully_async_trainer.FullyAsyncTrainer", "_fit_generate",
     "omni_verl.fully_async.OmniFullyAsyncTrainer"),
    # Its step metrics: each step's aggregate logged after the step is added to it.
    ("verl.experimental.fully_async_policy.fully_async_trainer.FullyAsyncTrainer", "_fit_log_aggregated_training_metrics",
     "omni_verl.fully_async.OmniFullyAsyncTrainer"),
    ("verl.experimental.fully_async_policy.fully_async_trainer.FullyAsyncTrainer", "_fit_postprocess_step",
     "omni_verl.fully_async.OmniFullyAsyncTrainer"),
)
"""Every private verl method our classes override; ``packages/omni-verl/tests/test_verl_compat.py``
fails when one is missing here, or no longer exists upstream with the same parameters."""


def ray_actor_class(actor: Any) -> type:
    """The plain class behind a ``@ray.remote`` class."""
    cls = getattr(actor, "__ray_actor_class__", None)
    if not isinstance(cls, type):
        raise TypeError(f"{actor!r} is not a Ray actor class (no __ray_actor_class__).")
    return cls


def register_worker_rollout(name: str, mode: str, target: str) -> None:
    """Make verl's worker-side ``get_rollout_class(name, mode)`` return ``target`` (FQN)."""
    from verl.workers.rollout import base as rollout_base

    rollout_base._ROLLOUT_REGISTRY[(name, mode)] = target


def auto_class_owns(auto_class: Any, config_cls: type) -> bool:
    return config_cls in auto_class._model_mapping.keys()


def model_class_for(auto_class: Any, config_cls: type) -> Any:
    return auto_class._model_mapping[config_cls]


@contextmanager
def as_language_model(model_config: Any) -> Iterator[None]:
    """Present ``model_type == "language_model"`` to verl's loader for the duration."""
    saved = model_config.model_type
    model_config.model_type = VERL_LANGUAGE_MODEL
    try:
        yield
    finally:
        model_config.model_type = saved


def reserve_server_port(server: Any) -> None:
    """Give a verl vLLM server (which serves no HTTP app) a port of its own, held open."""
    from verl.utils.net_utils import get_free_port

    port, reservation = get_free_port(server._server_address, with_alive_sock=True)
    server._server_port = port
    server._port_reservation = reservation  # closing the socket would free the port for reuse


CPU_BACKEND = "cpu:gloo"


def gloo_process_group_on_cpu() -> None:
    """On a CPU run, make verl's training workers start their process group as ``cpu:gloo``.

    verl's ``initialize_global_process_group_ray`` defaults its backend to
    ``f"cpu:gloo,{device}:{backend}"``; with verl's device being the CPU that names the CPU
    twice and ``torch.distributed`` raises "Duplicate device type cpu". Idempotent.
    """
    import verl.workers.engine_workers as workers

    current = workers.initialize_global_process_group_ray
    if getattr(current, "omni_rl_cpu", False):
        return

    def initialize_on_cpu(timeout_second: int | None = None, backend: str | None = None) -> Any:
        return current(timeout_second=timeout_second, backend=backend or CPU_BACKEND)

    initialize_on_cpu.omni_rl_cpu = True  # type: ignore[attr-defined]
    workers.initialize_global_process_group_ray = initialize_on_cpu


@contextmanager
def empty_weights() -> Iterator[None]:
    """Parameters registered inside are created on the meta device, keeping the attributes
    transformers sets on them (what accelerate's ``init_empty_weights`` does, without passing
    those attributes to the parameter's constructor, which raises under transformers 5)."""
    import torch

    register = torch.nn.Module.register_parameter

    def register_empty(module: torch.nn.Module, name: str, param: Any) -> None:
        register(module, name, param)
        if param is not None:
            current = module._parameters[name]
            assert current is not None
            empty = type(current)(current.to("meta"), requires_grad=current.requires_grad)
            empty.__dict__.update({k: v for k, v in current.__dict__.items() if k != "requires_grad"})
            module._parameters[name] = empty

    torch.nn.Module.register_parameter = register_empty  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register  # type: ignore[method-assign]


@contextmanager
def empty_weights_for_transformers() -> Iterator[None]:
    """While verl's FSDP engine builds a module: where verl would load with accelerate's
    ``init_empty_weights`` (every rank but the first, untied embeddings), use :func:`empty_weights`."""
    from accelerate import init_empty_weights  # type: ignore[import-untyped]
    from verl.workers.engine.fsdp import transformer_impl

    choose = transformer_impl.get_init_weight_context_manager

    def choose_working(*args: Any, **kwargs: Any) -> Any:
        context = choose(*args, **kwargs)
        return empty_weights if context is init_empty_weights else context

    transformer_impl.get_init_weight_context_manager = choose_working
    try:
        yield
    finally:
        transformer_impl.get_init_weight_context_manager = choose


POSITION_IDS = "position_ids"


def repair_3d_position_ids(data: Any) -> None:
    """Make a batch's nested mrope ``position_ids`` (rows ``[4, L_i]``) ragged along the
    sequence (``_ragged_idx`` 2), whichever axis torch or a pickle round trip left ragged.

    Raises:
        ValueError: the nested tensor's values fit neither layout.
    """
    import torch

    if POSITION_IDS not in data.keys():
        return
    positions: Any = data[POSITION_IDS]  # a jagged NestedTensor (values(), offsets(), _ragged_idx)
    if not (getattr(positions, "is_nested", False) and positions.dim() == 3):
        return
    values, offsets = positions.values(), positions.offsets()
    total = int(offsets[-1])
    if values.shape[-1] == total:  # laid out along the sequence: only the index was lost
        positions._ragged_idx = 2
        return
    if values.shape[0] != total:
        raise ValueError(f"position_ids: values {tuple(values.shape)} fit neither ragged axis (offsets end at {total}).")
    rows = values.split(torch.diff(offsets).tolist(), dim=0)  # each [4, L]: one length for all
    lengths = torch.tensor([0, *(int(row.shape[1]) for row in rows)], dtype=offsets.dtype)
    data[POSITION_IDS] = torch.nested.nested_tensor_from_jagged(
        torch.cat(rows, dim=1), lengths.cumsum(0), jagged_dim=2
    )


def equal_length_position_ids() -> None:
    """Use :func:`repair_3d_position_ids` where verl's training worker and engine call
    ``maybe_fix_3d_position_ids`` (idempotent)."""
    from verl.workers import engine_workers
    from verl.workers.engine import base

    for module in (engine_workers, base):
        module.maybe_fix_3d_position_ids = repair_3d_position_ids  # type: ignore[attr-defined]


class AfterPostprocess:
    """Mixin for verl's V1 agent-loop worker: :meth:`after_postprocess` sees each trajectory
    after verl's ``_agent_loop_postprocess`` has scored and stored it."""

    async def _agent_loop_postprocess(self, output: Any, validate: bool, **kwargs: Any) -> None:
        await super()._agent_loop_postprocess(output, validate, **kwargs)  # type: ignore[misc]
        self.after_postprocess(output if isinstance(output, list) else [output], validate, kwargs)

    def after_postprocess(self, outputs: list[Any], validate: bool, sample: dict[str, Any]) -> None:
        """``outputs``: the trajectory's agent-loop outputs (the last one carries the reward);
        ``sample``: the prompt's fields (``global_steps``, ``uid``, ...)."""
        raise NotImplementedError
