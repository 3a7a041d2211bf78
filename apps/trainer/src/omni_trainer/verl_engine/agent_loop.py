"""verl's agent-loop workers with the training adapter's processor.

verl's ``AgentLoopWorker`` takes its processor from ``HFModelConfig``, which is ``None``
for Qwen3-Omni (see :mod:`omni_trainer.verl_engine.processor`), and it is that worker's
processor -- not the agent loop's -- that builds the actor's batch: ``multi_modal_inputs``
(pixel values, audio features) and the mrope ``position_ids``. The worker class is chosen
through verl's documented hook, ``actor_rollout_ref.rollout.agent.agent_loop_manager_class``:
:class:`OmniAgentLoopManager` starts :class:`OmniAgentLoopWorkerTQ` (verl's V1/TransferQueue
worker) with the adapter's processor installed; the agent loops it instantiates receive the
same processor, so templating, tokenization and positions agree with the local engine.
"""

from __future__ import annotations

from typing import Any

import ray
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ

from omni_trainer.verl_engine.compat import ray_actor_class
from omni_trainer.verl_engine.processor import adapter_processor
from omni_trainer.verl_engine.settings import VerlSettings


class AdapterProcessorMixin:
    """Replace the worker's processor with the adapter's, before any rollout runs."""

    processor: Any
    model_config: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        processor = adapter_processor(VerlSettings.from_env())
        self.processor = processor
        self.model_config.processor = processor


class OmniAgentLoopWorker(AdapterProcessorMixin, AgentLoopWorker):
    """verl's batch-returning worker (legacy trainer, and the CPU harness) with our processor."""


class OmniAgentLoopWorkerTQ(AdapterProcessorMixin, ray_actor_class(AgentLoopWorkerTQ)):  # type: ignore[misc]
    """verl's V1 worker (outputs go to TransferQueue) with our processor."""


class OmniAgentLoopManager(AgentLoopManagerTQ):
    """verl's V1 agent-loop manager, starting :class:`OmniAgentLoopWorkerTQ` workers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = ray.remote(OmniAgentLoopWorkerTQ)
