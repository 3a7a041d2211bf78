"""Agent loops: from one request's engine outputs to the rollout sample training sees.

- ``single_turn_agent`` (alias ``single_turn``): one prompt, one response; the response is
  the policy stage's tokens, all of them trained. The default for thinker training.
- ``omni_single_turn_agent`` (alias ``omni_single_turn``): for autoregressive non-text
  stages (a talker): the rollout adapter's ``postprocess_agent_loop_output`` maps the
  stage outputs to the policy sequence and namespaced ``extra_fields``; the result is
  checked against the training adapter's field specs before it leaves the loop.

Both first pass the outputs through the adapter's ``combine_engine_outputs`` (the default
keeps the engine's single output; an adapter may keep every final stage).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from omni_contracts import (
    ExtraFieldSpec,
    Registry,
    RolloutAdapter,
    RolloutSample,
    SchemaError,
    StageOutput,
)


class AgentLoop(Protocol):
    def __call__(
        self,
        *,
        prompt_ids: Sequence[int],
        outputs: Sequence[StageOutput],
        adapter: RolloutAdapter,
        mode: str,
        specs: Mapping[str, ExtraFieldSpec],
    ) -> RolloutSample: ...


AGENT_LOOPS: Registry[str, AgentLoop] = Registry("agent loop")


def register_agent_loop(*names: str) -> Callable[[AgentLoop], AgentLoop]:
    """Decorator: register an agent loop as ``rollout.agent.default_agent_loop`` ``names``."""
    return AGENT_LOOPS.register(*names)


def get_agent_loop(name: str) -> AgentLoop:
    """The loop registered as ``name`` (``rollout.agent.default_agent_loop``); a miss lists the
    registered ones (``UnknownNameError``, a ``ValueError``)."""
    return AGENT_LOOPS.get(name)


def _policy_output(outputs: Sequence[StageOutput], policy_stage: int) -> StageOutput | None:
    matching = [output for output in outputs if output.stage_id == policy_stage]
    return matching[-1] if matching else None


def _text_sample(prompt_ids: Sequence[int], kept: Sequence[StageOutput], policy_stage: int) -> RolloutSample:
    output = _policy_output(kept, policy_stage)
    if output is None or output.aborted:
        return RolloutSample(tuple(prompt_ids), (), (), (), {"aborted": True})
    extra = {key: value for key, value in output.data.items() if key == "finish_reason"}
    return RolloutSample(
        prompt_ids=tuple(prompt_ids),
        response_ids=output.token_ids,
        response_mask=(1,) * len(output.token_ids),
        response_logprobs=output.logprobs,
        extra_fields=extra,
    )


@register_agent_loop("single_turn_agent", "single_turn")
def single_turn(
    *,
    prompt_ids: Sequence[int],
    outputs: Sequence[StageOutput],
    adapter: RolloutAdapter,
    mode: str,
    specs: Mapping[str, ExtraFieldSpec],
) -> RolloutSample:
    """The policy stage's tokens as the response (empty, marked aborted, if aborted)."""
    kept = adapter.combine_engine_outputs(list(outputs), mode)
    return _text_sample(prompt_ids, kept, adapter.policy_stage_id(mode))


@register_agent_loop("omni_single_turn_agent", "omni_single_turn")
def omni_single_turn(
    *,
    prompt_ids: Sequence[int],
    outputs: Sequence[StageOutput],
    adapter: RolloutAdapter,
    mode: str,
    specs: Mapping[str, ExtraFieldSpec],
) -> RolloutSample:
    """The adapter maps stage outputs to the policy sequence; the result is validated.

    Raises:
        ExtraFieldError: a namespaced field is missing, undeclared or misshapen (names the
            key and the shapes).
        SchemaError: the response, mask and log-probs do not align.
    """
    kept = adapter.combine_engine_outputs(list(outputs), mode)
    base = _text_sample(prompt_ids, kept, adapter.policy_stage_id(mode))
    sample = adapter.postprocess_agent_loop_output(base, kept, mode)
    if not isinstance(sample, RolloutSample):
        raise SchemaError(
            f"{type(adapter).__name__}.postprocess_agent_loop_output returned "
            f"{type(sample).__name__}, not a RolloutSample."
        )
    misaligned = sample.misaligned_fields()
    if misaligned:
        raise SchemaError(
            f"{type(adapter).__name__}.postprocess_agent_loop_output: {misaligned} do not align "
            f"with {len(sample.response_ids)} response_ids."
        )
    if not sample.extra_fields.get("aborted"):
        sample.validate_extra_fields(specs, where=f"{type(adapter).__name__} output")
    return sample
