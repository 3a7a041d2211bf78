"""A speech policy's sample in verl: what our rollout server adds to verl's ``TokenOutput``.

verl's ``generate`` returns the policy stage's tokens and log-probs. A speech stage (a talker)
also needs what the stages before it produced -- the thinker's text it spoke -- and the
model-native data its actor forward reads. :func:`speech_sample` builds that from every
stage's output of one request with the rollout adapter (``omni_single_turn``: its
``postprocess_agent_loop_output``, checked against the training adapter's field specs) and
:class:`~omni_trainer.engines.verl.agent_loop.OmniSpeechAgentLoop` turns it into verl's
training row. Light: no Ray import.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from omni_contracts import ExtraFieldSpec, RolloutAdapter, SchemaError, is_namespaced
from omni_rewards.audio import WeightedAudioReward
from omni_rewards.errors import AudioRewardError, InvalidSpeechSampleError, InvalidWaveformError
from omni_rollout.agent_loops import get_agent_loop
from omni_rollout.vllm_omni.outputs import convert_request
from omni_trainer.reward_guard import MASKED_FLAG

logger = logging.getLogger(__name__)

SPEECH_SAMPLE = "omni_rl_speech_sample"
"""The ``TokenOutput.extra_fields`` entry holding :func:`speech_sample`'s result."""


ENGINE_KEYS = ("waveform", "sample_rate", "spoken_ids")
SPEECH_STATUSES = ("ok", "error")
"""The rollout adapter's engine-side fields a speech sample carries for its reward."""
SOURCE_TRUNCATED = MASKED_FLAG
"""The rollout adapter's flag on a speech sample it masked out of training because the text it
spoke was cut at the length limit (omni_qwen3: the thinker's answer; see
``omni_qwen3.talker_outputs``); reported per sample in ``reward_extra_info``, so each step
counts them."""


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


def score_speech(
    rewards: WeightedAudioReward, waveform: Any, sample_rate: int | None, text: str, ground_truth: str | None
) -> tuple[float, dict[str, float]]:
    """One sample's reward and its extra info, with a fixed key set (every sample of a batch
    reports the same keys, see :func:`unscored_speech`): ``audio_reward/<key>`` per reward and
    the ``reward_<status>`` indicators. A sample without a waveform, with one that cannot be
    scored, or on which a reward fails scores 0 with ``reward_error`` 1 (counted, and
    logged), never a silent 0."""
    try:
        if waveform is None or sample_rate is None:
            raise InvalidWaveformError("the engine returned no waveform for this sample")
        result = rewards(np.asarray(waveform, dtype=np.float32), int(sample_rate), text, ground_truth)
    except (InvalidSpeechSampleError, AudioRewardError) as exc:
        logger.warning("speech reward failed: %s", exc)
        return unscored_speech(rewards, "error")
    score, info = unscored_speech(rewards, "ok")
    return float(result["score"]), {name: float(result.get(name, value)) for name, value in info.items()}


def unscored_speech(rewards: WeightedAudioReward, status: str) -> tuple[float, dict[str, float]]:
    """Score 0 and the extra info of a sample with ``status`` (``"error"``; ``"ok"`` gives the
    key set with zeros)."""
    info = {f"audio_reward/{key}": 0.0 for key in rewards.keys}
    info.update({f"reward_{name}": float(name == status) for name in SPEECH_STATUSES})
    return 0.0, info
