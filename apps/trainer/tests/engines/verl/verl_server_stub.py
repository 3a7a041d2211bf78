"""Our rollout server as verl's ``__init__`` and our ``run_server`` leave it, on a recording
``AsyncOmni`` (no Ray actor, no GPU): ``self.engine`` is the vLLM-Omni driver, ``generate``
is ours over verl's own. Shared by the wiring tests and the verl CPU harnesses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any


class StubRolloutConfig(SimpleNamespace):
    """The fields of verl's ``RolloutConfig`` that its server reads, with its ``get``."""

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


def stub_server(
    omni: Any,
    *,
    mode: str = "thinker_only",
    field_specs: Mapping[str, Any] | None = None,
    dedup: Any = None,
    global_steps: int = 5,
    **config: Any,
) -> Any:
    """``VllmOmniHttpServer`` for ``mode`` of Qwen3-Omni's pipeline; ``field_specs``: the
    training adapter's (a talker's), which make it keep every stage's output."""
    import asyncio

    from verl.workers.rollout.replica import RolloutMode

    from omni_contracts import get_rollout_adapter
    from omni_rollout.vllm_omni import VllmOmniDriver
    from omni_verl.rollout import VllmOmniHttpServer

    server: Any = object.__new__(VllmOmniHttpServer)
    server.config = StubRolloutConfig(**{
        "max_model_len": 64, "prompt_length": 32, "response_length": 16, "full_determinism": False, "seed": 0,
        "repetition_penalty": 1.0, "ignore_eos": False, "enable_rollout_routing_replay": False, "mtp": None,
        "free_cache_engine": True, **config,
    })
    server.model_config = SimpleNamespace(lora_rank=0, lora={}, processor=None)
    server.replica_rank, server.node_rank, server.global_steps = 2, 0, global_steps
    server.rollout_mode = RolloutMode.COLOCATED
    server._disaggregation_role, server._pd_decode_peers = "null", []
    server._submission_paused, server._rejecting, server._admitting = False, False, 0
    server._resume_event = asyncio.Event()
    server._resume_event.set()
    server.rollout_adapter = get_rollout_adapter("qwen3_omni_moe")
    server.mode = mode
    server.field_specs = dict(field_specs or {})
    server.engine = VllmOmniDriver(omni, server.rollout_adapter, mode, dedup_pad_tokens=dedup,
                                   keep_stage_outputs=bool(field_specs))
    return server


def stage_output(
    stage_id: int,
    prompt_ids: Sequence[int],
    token_ids: Sequence[int],
    *,
    logprobs: Sequence[float] | None = None,
    multimodal_output: Mapping[str, Any] | None = None,
    finish_reason: str = "stop",
) -> Any:
    """One stage's finished ``OmniRequestOutput`` as vLLM-Omni 0.28 yields it (vLLM's own
    classes), with the sampled tokens' log-probs when given and the completion's
    ``multimodal_output`` (a talker's codes) as vLLM-Omni attaches it."""
    from vllm.logprobs import Logprob
    from vllm.outputs import CompletionOutput
    from vllm_omni.outputs import OmniRequestOutput

    completion = CompletionOutput(
        index=0, text="", token_ids=list(token_ids), cumulative_logprob=None, finish_reason=finish_reason,
        logprobs=None if logprobs is None else [{t: Logprob(logprob=lp, rank=1)} for t, lp in zip(token_ids, logprobs)],
    )
    if multimodal_output is not None:
        completion.multimodal_output = dict(multimodal_output)  # type: ignore[attr-defined]
    return OmniRequestOutput(request_id="r", stage_id=stage_id, prompt_token_ids=list(prompt_ids),
                             outputs=[completion], finished=True)
