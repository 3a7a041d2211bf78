"""Every reliance of the vLLM-Omni driver on an undocumented name or behaviour of vLLM-Omni 0.28.

Each item has a canary in ``packages/omni-rollout/tests/test_vllm_omni_upstream_api.py`` that
fails when upstream changes it; nothing outside this module and ``driver`` depends on them.

- :func:`request_states`: ``AsyncOmni.request_states``, its table of in-flight requests
  (keyed by the internal id ``<request_id>-<uuid>``; an entry leaves when the request's
  ``generate`` ends). vLLM's ``AsyncLLM`` keeps the same table on ``output_processor``.
  :func:`external_request_id`: the caller's id on an entry (what ``AsyncOmni.abort`` takes).
- :func:`rpc_failures`: vLLM-Omni's stage pool answers a failed worker RPC with
  ``{"supported": False, "error": ...}`` instead of raising.
- :data:`LORA_STAGE_ID`: ``AsyncOmni.generate(lora_request=...)`` reaches stage 0 only.
- Cache clearing: ``AsyncOmni.reset_prefix_cache`` and ``reset_encoder_cache`` only log a
  warning. The one path that clears a stage's prefix, multimodal and encoder caches is
  ``AsyncOmni.pause_generation(clear_cache=True, stage_ids=...)``: it reaches
  ``EngineCore.pause_scheduler``, which runs ``EngineCore._reset_caches`` once the stage is idle.
- Sleep: after ``sleep`` of an AR stage ``AsyncOmni.wake_up`` leaves its admission gate closed
  (vLLM's ``EngineCore.wake_up`` resumes scheduling once fully awake), and ``wake_up`` after
  ``sleep(level=2)`` raises ``NotImplementedError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

LORA_STAGE_ID = 0
"""The only stage a request's LoRA reaches in vLLM-Omni 0.28."""

MAX_SLEEP_LEVEL = 1
"""The deepest sleep ``AsyncOmni.wake_up`` can come back from (level 2 discards the weights)."""


def request_states(omni: Any) -> Mapping[str, Any]:
    """``AsyncOmni``'s live table of in-flight requests (internal id -> state)."""
    states = getattr(omni, "request_states", None)
    if not isinstance(states, Mapping):
        raise TypeError(
            f"{type(omni).__name__} has no request_states mapping; vLLM-Omni changed how it "
            "tracks in-flight requests (see omni_rollout.vllm_omni.compat)."
        )
    return states


def rpc_failures(results: Sequence[Any]) -> list[Any]:
    """The stage answers of a ``collective_rpc`` that report a failure."""
    return [
        result
        for result in results
        if isinstance(result, dict) and (result.get("error") or result.get("supported") is False)
    ]


def external_request_id(state: Any) -> str:
    """The id the caller gave ``generate``, from an entry of :func:`request_states`."""
    return str(state.external_request_id)
