"""A speech policy's sample as a verl rollout server returns it: what the server adds to verl's
``TokenOutput`` (``extra_fields[SPEECH_SAMPLE]``) beside the policy stage's tokens and log-probs.

A speech stage (a talker) also needs what the stages before it produced -- the thinker's text
it spoke -- and the model-native data its actor forward reads. :func:`speech_sample` builds that
from every stage's output of one request with the rollout adapter (``omni_single_turn``: its
``postprocess_agent_loop_output``, checked against the training adapter's field specs). Both
rollout servers write it (vLLM-Omni's, and the CPU's ``omni_local``), and the app's speech agent
loop reads it. Light: no verl, torch or Ray import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from omni_contracts import ExtraFieldSpec, RolloutAdapter, SchemaError, is_namespaced
from omni_contracts.speech import SOURCE_TRUNCATED
from omni_rollout.agent_loops import get_agent_loop
from omni_rollout.vllm_omni.outputs import convert_request

SPEECH_SAMPLE = "omni_rl_speech_sample"
"""The ``TokenOutput.extra_fields`` entry holding :func:`speech_sample`'s result."""
ENGINE_KEYS = ("waveform", "sample_rate", "spoken_ids")
"""The rollout adapter's engine-side fields a speech sample carries for its reward."""


def speech_sample(
    adapter: RolloutAdapter,
    mode: str,
    prompt_ids: Sequence[int],
    stage_outputs: Sequence[Any],
    specs: Mapping[str, ExtraFieldSpec],
    token_ids: Sequence[int],
) -> dict[str, Any] | None:
    """``{"prompt_ids": [...], "response_mask": [...], "fields": {namespaced key: value},
    "source_truncated": bool, "waveform": ..., "sample_rate": ..., "spoken_ids": [...]}`` for one
    request (the last three: what the adapter stored for the reward, ``None`` where it stored
    nothing; the mask is the adapter's: all 0 for a sample it keeps out of training, which
    :data:`SOURCE_TRUNCATED` flags); ``None`` when the request was aborted.

    Raises:
        SchemaError: the adapter's sample is not the policy stage's ``token_ids`` verl
            returned, or its fields fail the specs (``ExtraFieldError``, naming the key).
    """
    converted = convert_request(adapter, mode, prompt_ids, stage_outputs)
    if converted.aborted:
        return None
    loop = get_agent_loop("omni_single_turn_agent")
    sample = loop(prompt_ids=prompt_ids, outputs=converted.kept_outputs, adapter=adapter, mode=mode, specs=specs)
    if list(sample.response_ids) != list(token_ids):
        raise SchemaError(
            f"{type(adapter).__name__} mapped the request to {len(sample.response_ids)} response tokens, but the "
            f"policy stage returned {len(token_ids)}; the speech sample must be the policy stage's tokens."
        )
    fields = {key: value for key, value in sample.extra_fields.items() if is_namespaced(key)}
    engine = {key: sample.extra_fields.get(key) for key in ENGINE_KEYS}
    return {
        "prompt_ids": list(sample.prompt_ids), "response_mask": list(sample.response_mask), "fields": fields,
        SOURCE_TRUNCATED: bool(sample.extra_fields.get(SOURCE_TRUNCATED, False)), **engine,
    }
