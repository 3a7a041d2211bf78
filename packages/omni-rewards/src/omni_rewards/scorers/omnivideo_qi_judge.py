"""OmniVideo-R1 QI's whole reward, its judge included: a reward function with verl's
signature for ``reward.custom_reward_function`` (``path=pkg://omni_rewards.scorers.omnivideo_qi_judge``,
``name=compute_score``), as verl-omni's launcher names its own ``omnivideo_qi.py``.

The rules (:mod:`omni_rewards.scorers.omnivideo_qi`) decide the format and a multiple-choice
answer; a judge served by ``reward.reward_model`` (or any OpenAI-compatible server) is asked,
concurrently, as verl-omni asks it:

- **consistency**, once per ``<time>``/``<caption>`` pair: the span's frames
  (:func:`omni_rewards.video_spans.span_frames` of ``extra_info.video_path``, at most
  ``max_frames_per_segment``) and the caption, under :data:`CONSISTENCY_RUBRIC`;
- **completeness**, once, when every span decoded: all the spans' frames, evenly thinned to
  ``max_completeness_frames``, with ``extra_info.question`` and the ground truth, under
  :data:`COMPLETENESS_RUBRIC`;
- **answer**, for an open answer that is no exact match: text only, under :data:`ANSWER_RUBRIC`.

Each request is greedy, at most 256 tokens, and the score is the ``score`` of the JSON object
in the answer, clamped to [0, 1].

Deliberate differences from verl-omni, each a failure where verl-omni would pay 0 unseen:

- a judge answer without a readable score raises :class:`~omni_rewards.judge.JudgeAnswerError`
  (counted as a failed sample, ``reward.max_error_rate`` applies); verl-omni scores it 0;
- a row whose video file is missing or does not decode raises; verl-omni scores the pairs 0.
  A span that holds no two frames (it starts past the clip's end) is the response's fault,
  not the data's: its consistency is 0, completeness is 0, and ``decode_failures`` counts it,
  as in verl-omni;
- the rubrics are our own wording of the paper's (Figures 11 and 12), with the same criteria
  and 0-1 scale; verl-omni's own function runs unchanged on both engines where its imports are
  installed;
- the result holds numbers only (no ``answer_reason`` / ``completeness_reason`` texts).

Settings: ``reward.custom_reward_function.reward_kwargs`` (``judge_url``, ``judge_model``,
``timeout_s``, ``max_frames_per_segment``, ``max_completeness_frames``, ``max_segments``), else
verl-omni's environment variables (``OMNIVIDEO_QI_JUDGE_URL``, ``OMNIVIDEO_QI_JUDGE_MODEL``,
``OMNIVIDEO_QI_JUDGE_TIMEOUT``, ``OMNIVIDEO_QI_MAX_FRAMES_PER_SEGMENT``,
``OMNIVIDEO_QI_MAX_COMPLETENESS_FRAMES``, ``OMNIVIDEO_QI_MAX_SEGMENTS``), else its defaults. A
``judge_url`` (or the variable) is asked instead of verl's reward-model router, as there.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omni_rewards.judge import JudgeError, judge_score
from omni_rewards.scorers.omnivideo_qi import (
    MAX_SEGMENTS,
    Grounding,
    compose_qi_score,
    parse_qi_response,
    rule_parts,
)
from omni_rewards.video_spans import SpanError, span_frames

_SCALE = ('Reply with only a JSON object: {"score": <a number from 0.0 to 1.0>, "reason": "<one short '
          'sentence>"}.')
CONSISTENCY_RUBRIC = (
    "You check whether a caption tells the truth about a video segment, shown as frames. Look for: every "
    "object, action and attribute the caption names is visible in the frames (colours, directions, counts and "
    "order included); nothing in it is invented; a sound it describes is plausible for the scene and not "
    "contradicted by it. Score 1.0 when every statement holds; 0.7 to 0.9 for negligible slips; 0.4 to 0.6 "
    "when the topic is right but some claims are not in the frames; 0.1 to 0.3 for major inventions; 0.0 for "
    "another scene or an unrelated caption. " + _SCALE
)
COMPLETENESS_RUBRIC = (
    "You judge the video segments a model picked as evidence for a question and its reference answer. The "
    "segments are shown as frames, stitched together. Look for: the frames hold what is needed to reach the "
    "answer (for a question about sound, visual context that implies it counts); the segments are cut tight "
    "around the key moments, without padding or repeated scenes; no step or detail the answer needs is "
    "missing. Score 1.0 when all the evidence is there and tightly cut; 0.7 to 0.9 for a little extra footage; "
    "0.4 to 0.6 when the core is there but with much redundancy or a missing link; 0.1 to 0.3 for partial or "
    "poorly matching evidence; 0.0 when the segments do not show where the answer comes from. " + _SCALE
)
ANSWER_RUBRIC = (
    "You compare a candidate answer with the reference answer to a question, fairly. Pay for the same "
    "meaning, not for shared words. " + _SCALE
)
CONSISTENCY_PROMPT = "The frames above are one segment of the video. Is this caption true to the segment?\n\nCaption: {caption}"
COMPLETENESS_PROMPT = (
    "The frames above are the segments the model picked, stitched together. Do they hold the evidence for the "
    "reference answer to this question, and little else?\n\nQuestion: {question}\n\nReference answer: {ground_truth}"
)
ANSWER_PROMPT = "Question: {question}\nReference answer: {ground_truth}\nCandidate answer: {answer}"
"""The user turn's text after the frames; each ends with what is judged."""
DEFAULT_JUDGE_MODEL = "Qwen/Qwen3-VL-30B-A3B-Instruct"
"""The model name sent when neither the settings nor the judge's tokenizer give one (verl-omni's)."""


@dataclass(frozen=True)
class JudgeSettings:
    """Where the judge is and how much it is shown."""

    address: str
    model: str
    timeout_s: float = 300.0
    max_frames_per_segment: int = 8
    max_completeness_frames: int = 32


def _pick(options: Mapping[str, Any], key: str, variable: str, default: Any) -> Any:
    """A reward kwarg, else verl-omni's environment variable, else the default."""
    if options.get(key) is not None:
        return options[key]
    return os.environ.get(variable) or default


def judge_settings(reward_router_address: str | None, reward_model_tokenizer: Any,
                   options: Mapping[str, Any]) -> JudgeSettings:
    """The settings from the reward kwargs, else verl-omni's environment, else its defaults.

    Raises:
        JudgeError: no judge to ask (no ``judge_url`` and no reward-model router).
    """
    address = str(_pick(options, "judge_url", "OMNIVIDEO_QI_JUDGE_URL", "") or reward_router_address or "")
    if not address:
        raise JudgeError("omnivideo_r1_qi's intent rewards ask a judge: enable reward.reward_model, or set "
                         "reward.custom_reward_function.reward_kwargs.judge_url (or OMNIVIDEO_QI_JUDGE_URL) to an "
                         "OpenAI-compatible server")
    model = _pick(options, "judge_model", "OMNIVIDEO_QI_JUDGE_MODEL", "") or getattr(reward_model_tokenizer, "name_or_path", "")
    return JudgeSettings(
        address=address, model=str(model or DEFAULT_JUDGE_MODEL),
        timeout_s=float(_pick(options, "timeout_s", "OMNIVIDEO_QI_JUDGE_TIMEOUT", 300.0)),
        max_frames_per_segment=int(_pick(options, "max_frames_per_segment", "OMNIVIDEO_QI_MAX_FRAMES_PER_SEGMENT", 8)),
        max_completeness_frames=int(_pick(options, "max_completeness_frames", "OMNIVIDEO_QI_MAX_COMPLETENESS_FRAMES", 32)),
    )


def thin_evenly(items: Sequence[bytes], limit: int) -> list[bytes]:
    """At most ``limit`` of ``items``, evenly spread, the first and the last kept."""
    if len(items) <= limit:
        return list(items)
    if limit <= 1:
        return list(items[:1])
    return [items[round(i * (len(items) - 1) / (limit - 1))] for i in range(limit)]


async def _ask(settings: JudgeSettings, rubric: str, text: str, frames: Sequence[bytes] = ()) -> float:
    verdict = await asyncio.to_thread(judge_score, settings.address, text, images=frames, system=rubric,
                                      model=settings.model, max_tokens=256, timeout_s=settings.timeout_s)
    return verdict.score


async def _segment(settings: JudgeSettings, video: str, pair: Grounding) -> list[bytes]:
    """The span's frames, or none when the span holds no two frames (the response's fault)."""
    try:
        return await asyncio.to_thread(span_frames, video, pair.start, pair.end,
                                       max_frames=settings.max_frames_per_segment)
    except SpanError:
        return []


async def compute_score(
    data_source: str | None = None, solution_str: str = "", ground_truth: str = "",
    extra_info: Mapping[str, Any] | None = None, reward_router_address: str | None = None,
    reward_model_tokenizer: Any = None, **kwargs: Any,
) -> dict[str, float]:
    """OmniVideo-R1 QI's reward, Eq. (8), with its judge (see the module docstring).

    Returns:
        ``score``, ``format``, ``answer``, ``consistency``, ``completeness``, ``intent``,
        ``num_groundings`` and ``decode_failures``.

    Raises:
        JudgeError (and its timeout and unreadable-answer kinds): the judge failed; nothing is paid.
        FileNotFoundError, ValueError: the row's video is missing or does not decode.
    """
    info = extra_info or {}
    solution, truth = str(solution_str or ""), str(ground_truth or "")
    multiple_choice = bool(info.get("is_multiple_choice", False))
    max_segments = int(_pick(kwargs, "max_segments", "OMNIVIDEO_QI_MAX_SEGMENTS", MAX_SEGMENTS))
    parts = rule_parts(solution, truth, multiple_choice=multiple_choice, max_segments=max_segments)
    if not parts.needs_judge:
        return {**compose_qi_score(parts), "decode_failures": 0.0}
    settings = judge_settings(reward_router_address, reward_model_tokenizer, kwargs)
    response = parse_qi_response(solution, max_segments)
    question = str(info.get("question") or "")

    answer_task = None
    if parts.answer is None:  # an open answer that is no exact match
        answer_task = asyncio.ensure_future(_ask(settings, ANSWER_RUBRIC, ANSWER_PROMPT.format(
            question=question, ground_truth=truth, answer=response.answer)))
    try:
        video = str(info.get("video_path") or "")
        segments = await asyncio.gather(*(_segment(settings, video, pair) for pair in response.groundings))
        consistency = await asyncio.gather(*(
            _ask(settings, CONSISTENCY_RUBRIC, CONSISTENCY_PROMPT.format(caption=pair.caption), frames)
            for pair, frames in zip(response.groundings, segments, strict=True) if frames))
        scores = iter(consistency)
        per_pair = [next(scores) if frames else 0.0 for frames in segments]
        failures = sum(1 for frames in segments if not frames)
        completeness = 0.0
        if segments and not failures:
            stitched = thin_evenly([frame for frames in segments for frame in frames], settings.max_completeness_frames)
            completeness = await _ask(settings, COMPLETENESS_RUBRIC, COMPLETENESS_PROMPT.format(
                question=question, ground_truth=truth), stitched)
        open_answer = await answer_task if answer_task is not None else None
    finally:
        if answer_task is not None and not answer_task.done():
            answer_task.cancel()
    result = compose_qi_score(parts, consistency=per_pair, completeness=completeness, open_answer=open_answer)
    return {**result, "decode_failures": float(failures)}
