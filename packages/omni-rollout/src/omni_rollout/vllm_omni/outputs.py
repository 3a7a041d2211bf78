"""Turn what vLLM-Omni returns for one request into a rollout sample.

vLLM-Omni yields one ``RequestOutput``-shaped object per finished stage (``stage_id``,
``outputs: list[CompletionOutput]``); each completion has ``token_ids``, ``logprobs``
(per position a mapping token id -> object with ``.logprob``, when requested) and
``finish_reason``, and may carry ``multimodal_output`` (a talker's codes). These are first
made engine-neutral (:class:`StageOutput`; the stage's prompt ids, multimodal output and
finish reason go to its ``data``), then the adapter's ``combine_engine_outputs`` chooses what is kept, and
the policy stage's kept output becomes the sample's response.

Aborts arrive as ``finish_reason == "abort"`` with empty token ids, or (pending
vllm-omni#6973) as an empty ``outputs`` list; both become an aborted ``StageOutput`` and
an empty response with ``finish_reason == "abort"``, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omni_contracts import RolloutAdapter, RolloutSample, SchemaError, StageOutput

ABORT = "abort"


@dataclass(frozen=True)
class ConvertedRequest:
    """One request's result: the sample plus what an agent loop needs next.

    Attributes:
        sample: response ids/mask/log-probs of the policy stage.
        kept_outputs: what ``combine_engine_outputs`` kept, for
            ``postprocess_agent_loop_output``.
        finish_reason: the policy completion's reason (``"stop"``, ``"length"``,
            ``"abort"``, ...).
    """

    sample: RolloutSample
    kept_outputs: tuple[StageOutput, ...]
    finish_reason: str

    @property
    def aborted(self) -> bool:
        return self.finish_reason == ABORT


def _sampled_logprobs(
    token_ids: Sequence[int], logprobs: Sequence[Mapping[int, Any]] | None, stage_id: int
) -> tuple[float, ...] | None:
    """The log-prob of each sampled token, read from vLLM's per-position mappings."""
    if logprobs is None:
        return None
    if len(logprobs) != len(token_ids):
        raise SchemaError(
            f"Stage {stage_id}: engine returned {len(logprobs)} log-prob entries for "
            f"{len(token_ids)} tokens; request logprobs=0 so each position has one."
        )
    values = []
    for position, (token, entry) in enumerate(zip(token_ids, logprobs)):
        if token not in entry:
            raise SchemaError(
                f"Stage {stage_id}, position {position}: sampled token {token} has no "
                f"log-prob (entry holds {sorted(entry)[:5]}); the engine must return the "
                "sampled token's log-prob."
            )
        logprob = entry[token]
        values.append(float(getattr(logprob, "logprob", logprob)))
    return tuple(values)


def _stage_data(engine_output: Any, completion: Any) -> dict[str, object]:
    """What an adapter may need besides the tokens: the prompt the stage ran on (a later
    stage's prompt is built by vLLM-Omni, e.g. a talker's prefill placeholder) and the
    completion's ``multimodal_output`` (a talker's codes), when present."""
    data: dict[str, object] = {}
    prompt = getattr(engine_output, "prompt_token_ids", None)
    if prompt is not None:
        data["prompt_token_ids"] = tuple(int(t) for t in prompt)
    multimodal = getattr(completion, "multimodal_output", None) or getattr(engine_output, "multimodal_output", None)
    if isinstance(multimodal, Mapping) and multimodal:
        data["multimodal_output"] = multimodal
    return data


def stage_output_from_engine(
    engine_output: Any, *, sample_index: int = 0, default_stage_id: int = 0
) -> tuple[StageOutput, str]:
    """One vLLM(-Omni) request output -> (:class:`StageOutput`, finish reason).

    A :class:`StageOutput` passes through unchanged (reason ``"abort"`` if aborted,
    else ``"stop"``). An empty ``outputs`` list, or one shorter than ``sample_index``,
    counts as an abort.
    """
    if isinstance(engine_output, StageOutput):
        return engine_output, ABORT if engine_output.aborted else "stop"
    stage_id = getattr(engine_output, "stage_id", None)
    stage_id = default_stage_id if stage_id is None else int(stage_id)
    completions = list(getattr(engine_output, "outputs", None) or [])
    if sample_index >= len(completions):
        return StageOutput(stage_id, (), None, finished=True, aborted=True), ABORT
    completion = completions[sample_index]
    token_ids = tuple(int(t) for t in (completion.token_ids or ()))
    reason = str(getattr(completion, "finish_reason", None) or "")
    logprobs = _sampled_logprobs(token_ids, getattr(completion, "logprobs", None), stage_id)
    aborted = reason == ABORT
    data = _stage_data(engine_output, completion)
    if reason:
        # Why the stage stopped ("stop", "length"), as the local engine records it: a later
        # stage may have consumed the output differently after a cut (see omni_qwen3's talker).
        data["finish_reason"] = reason
    output = StageOutput(
        stage_id,
        token_ids,
        logprobs,
        finished=bool(getattr(engine_output, "finished", True)),
        aborted=aborted,
        data=data,
    )
    return output, reason or ("stop" if output.finished else "")


def convert_request(
    adapter: RolloutAdapter,
    mode: str,
    prompt_ids: Sequence[int],
    engine_outputs: Sequence[Any],
    *,
    sample_index: int = 0,
) -> ConvertedRequest:
    """All stage outputs of one request -> :class:`ConvertedRequest`.

    The response is the kept output of ``adapter.policy_stage_id(mode)``. An aborted
    policy output keeps whatever tokens it has (usually none) with reason ``"abort"``;
    if the combiner kept no policy output at all, the response is empty, also ``"abort"``.
    """
    converted = [
        stage_output_from_engine(o, sample_index=sample_index, default_stage_id=i)
        for i, o in enumerate(engine_outputs)
    ]
    reasons = {output.stage_id: reason for output, reason in converted}
    kept = tuple(adapter.combine_engine_outputs([o for o, _ in converted], mode))
    policy_id = adapter.policy_stage_id(mode)
    policy = next((o for o in kept if o.stage_id == policy_id), None)
    if policy is None:
        return ConvertedRequest(RolloutSample(tuple(prompt_ids), (), ()), kept, ABORT)
    sample = RolloutSample(
        prompt_ids=tuple(prompt_ids),
        response_ids=policy.token_ids,
        response_mask=(1,) * len(policy.token_ids),
        response_logprobs=policy.logprobs,
    )
    reason = ABORT if policy.aborted else reasons.get(policy_id, "stop")
    return ConvertedRequest(sample, kept, reason)
