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
- Frontend multimodal cache: :func:`clear_frontend_mm_cache`. vLLM mirrors processed media
  between the frontend (P0, ``AsyncOmni.input_processor.renderer.mm_processor_cache``) and the
  engine (P1): a media item P0 has seen is sent as its hash alone. ``AsyncOmni.reset_mm_cache``
  looks for the cache on the input processor itself (vLLM 0.28 keeps it on its renderer), so
  it clears nothing; after a stage clears its P1 cache (a cache clear, a sleep), hash-only
  requests then reach an engine that no longer has the media.
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


def clear_frontend_mm_cache(omni: Any) -> bool:
    """Clear ``AsyncOmni``'s frontend (P0) multimodal processor cache with vLLM's own call
    (``renderer.clear_mm_cache``); ``False`` when the engine keeps no such cache."""
    processor = getattr(omni, "input_processor", None)
    renderer = getattr(processor, "renderer", None)
    if renderer is None:
        raise TypeError(
            f"{type(omni).__name__} has no input_processor.renderer; vLLM-Omni changed where its frontend "
            "multimodal cache lives (see omni_rollout.vllm_omni.compat)."
        )
    if renderer.mm_processor_cache is None:
        return False
    renderer.clear_mm_cache()
    return True
