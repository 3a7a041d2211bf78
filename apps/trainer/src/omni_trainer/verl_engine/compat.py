"""Every reliance of the verl engine on a private name of verl, Ray or transformers.

Each function here reaches one name that is not a documented extension point; each has a
canary in ``apps/trainer/tests/test_verl_compat.py`` that fails when upstream moves or
changes it. Nothing outside this module touches these names.

- ``ray_actor_class``: Ray's ``__ray_actor_class__`` (the class behind ``@ray.remote``),
  to subclass verl's V1 agent-loop worker.
- ``register_worker_rollout``: verl's ``_ROLLOUT_REGISTRY`` (worker-side rollout lookup
  has no public register function; the replica side has ``RolloutReplicaRegistry``).
- ``auto_class_owns`` / ``model_class_for``: transformers' ``_model_mapping`` of an
  auto class (is a config class loadable by it?).
- ``as_language_model``: verl's FSDP ``_build_module`` loads a causal LM only when the
  model type is ``language_model``; our engine has its own type (verl's registry refuses a
  second ``language_model`` engine).
- ``reserve_server_port``: verl's vLLM server's ``_server_address`` / ``_server_port``
  (``get_server_address`` reports them; verl's load balancer keys replicas by ``ip:port``),
  set without the HTTP app verl would start.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

VERL_LANGUAGE_MODEL = "language_model"


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
