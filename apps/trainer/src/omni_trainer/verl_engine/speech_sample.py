"""A speech policy's sample in verl: what our rollout server adds to verl's ``TokenOutput``.

verl's ``generate`` returns the policy stage's tokens and log-probs. A speech stage (a talker)
also needs what the stages before it produced -- the thinker's text it spoke -- and the
model-native data its actor forward reads. :func:`speech_sample` builds that from every
stage's output of one request with the rollout adapter (``omni_single_turn``: its
``postprocess_agent_loop_output``, checked against the training adapter's field specs) and
:class:`~omni_trainer.verl_engine.agent_loop.OmniSpeechAgentLoop` turns it into verl's
training row. Light: no Ray import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from omni_contracts import ExtraFieldSpec, RolloutAdapter, SchemaError, is_namespaced
from omni_rollout.agent_loops import get_agent_loop
from omni_rollout.vllm_omni.outputs import convert_request

SPEECH_SAMPLE = "omni_rl_speech_sample"
"""The ``TokenOutput.extra_fields`` entry holding :func:`speech_sample`'s result."""


def speech_sample(
    adapter: RolloutAdapter,
    mode: str,
    prompt_ids: Sequence[int],
    stage_outputs: Sequence[Any],
    specs: Mapping[str, ExtraFieldSpec],
    token_ids: Sequence[int],
) -> dict[str, Any] | None:
    """``{"prompt_ids": [...], "fields": {namespaced key: value}}`` for one request; ``None``
    when it was aborted.

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
    return {"prompt_ids": list(sample.prompt_ids), "fields": fields}
