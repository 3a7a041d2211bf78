"""Engine prompts per request and engine outputs -> rollout samples, with mocked outputs."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from omni_contracts import (
    RolloutAdapter,
    SchemaError,
    StageConfig,
    StageOutput,
)
from omni_model_kit.rollout_adapter import keep_final_outputs
from omni_rollout.vllm_omni.outputs import convert_request, stage_output_from_engine
from omni_rollout.vllm_omni.prompts import build_engine_prompt, dedup_function

AUDIO_PAD = 7


class TextAdapter(RolloutAdapter):
    """Single text stage; the defaults for prompts and outputs."""

    modes = ("text",)

    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        return (StageConfig(0, "FakeLM", "text", final_output=True),)

    def rollout_flags(self, mode: str) -> dict[int, dict[str, object]]:
        return {}

    def get_pipeline_id(self, mode: str) -> str:
        return "fake"


class CustomPromptAdapter(TextAdapter):
    """Builds its own prompt; ``drop_kwargs`` simulates the bug check_engine_prompt catches."""

    def __init__(self, drop_kwargs: bool = False) -> None:
        self.drop_kwargs = drop_kwargs

    def prepare_engine_prompt(
        self, prompt_ids: Sequence[int], multi_modal_data: Mapping[str, Any] | None,
        mm_processor_kwargs: Mapping[str, Any] | None,
    ) -> dict[str, Any] | None:
        prompt: dict[str, Any] = {"prompt_token_ids": list(prompt_ids), "modalities": ["text"]}
        if multi_modal_data:
            prompt["multi_modal_data"] = dict(multi_modal_data)
        if mm_processor_kwargs is not None and not self.drop_kwargs:
            prompt["mm_processor_kwargs"] = dict(mm_processor_kwargs)
        return prompt


class TwoFinalAdapter(TextAdapter):
    """Thinker (policy, stage 0) and talker (stage 1) both final; keeps both outputs."""

    modes = ("both",)

    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        return (StageConfig(0, "FakeLM", "text", final_output=True, return_hidden_states=True),
                StageConfig(1, "FakeTalker", "codec", final_output=True, inputs=(0,)))

    def combine_engine_outputs(self, outputs: Sequence[StageOutput], mode: str
                               ) -> tuple[StageOutput, ...]:
        return keep_final_outputs(outputs, self.build_stage_configs(mode))


class Processor:
    """Stands in for a processor with a bound ``dedup_pad_tokens``."""

    @staticmethod
    def dedup_pad_tokens(ids: Sequence[int]) -> list[int]:
        return [t for i, t in enumerate(ids) if not (t == AUDIO_PAD and i and ids[i - 1] == AUDIO_PAD)]


@dataclass
class Logprob:
    logprob: float


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None = None
    finish_reason: str | None = "stop"


@dataclass
class RequestOutput:
    """Shaped like vLLM-Omni's OmniRequestOutput (a vLLM RequestOutput with stage_id)."""

    outputs: list[Completion] = field(default_factory=list)
    stage_id: int | None = 0
    finished: bool = True


def with_logprobs(tokens: list[int], values: list[float]) -> Completion:
    # vLLM with logprobs=0: one entry per position holding the sampled token (and, with
    # logprobs=k, up to k more; the sampled one is read by id).
    entries = [{t: Logprob(v), t + 1: Logprob(-9.0)} for t, v in zip(tokens, values)]
    return Completion(tokens, entries, "length")


# --- prompts -------------------------------------------------------------------------


def test_default_prompt_dedups_pads_and_carries_media_and_kwargs() -> None:
    audio = object()
    prompt = build_engine_prompt(
        TextAdapter(), [1, AUDIO_PAD, AUDIO_PAD, AUDIO_PAD, 2], {"audio": [audio]},
        {"sampling_rate": 16000}, dedup_pad_tokens=dedup_function(Processor()),
    )
    assert prompt == {"prompt_token_ids": [1, AUDIO_PAD, 2], "multi_modal_data": {"audio": [audio]},
                      "mm_processor_kwargs": {"sampling_rate": 16000}}


def test_text_prompt_has_only_token_ids() -> None:
    assert build_engine_prompt(TextAdapter(), (3, 4)) == {"prompt_token_ids": [3, 4]}
    assert dedup_function(object()) is None
    assert dedup_function(None) is None


def test_custom_prompt_is_used_when_it_keeps_the_kwargs() -> None:
    prompt = build_engine_prompt(CustomPromptAdapter(), [1, 2], {"image": ["img"]},
                                 {"max_pixels": 1024})
    assert prompt["modalities"] == ["text"]
    assert prompt["mm_processor_kwargs"] == {"max_pixels": 1024}


def test_custom_prompt_that_drops_mm_processor_kwargs_is_refused() -> None:
    with pytest.raises(SchemaError, match="has no 'mm_processor_kwargs'"):
        build_engine_prompt(CustomPromptAdapter(drop_kwargs=True), [1], None, {"fps": 2})


def test_custom_prompt_without_ids_is_refused() -> None:
    class NoIds(TextAdapter):
        def prepare_engine_prompt(self, prompt_ids: Sequence[int], multi_modal_data: Any,
                                  mm_processor_kwargs: Any) -> dict[str, Any]:
            return {"multi_modal_data": {}}

    with pytest.raises(SchemaError, match="neither 'prompt_token_ids' nor 'prompt'"):
        build_engine_prompt(NoIds(), [1], None, None)


def test_empty_prompt_is_refused() -> None:
    with pytest.raises(SchemaError, match="empty prompt ids"):
        build_engine_prompt(TextAdapter(), [])


# --- outputs -------------------------------------------------------------------------


def test_completion_becomes_a_sample_with_sampled_logprobs() -> None:
    engine = [RequestOutput([with_logprobs([5, 6, 7], [-0.1, -0.2, -0.3])])]
    result = convert_request(TextAdapter(), "text", [1, 2], engine)
    assert result.sample.prompt_ids == (1, 2)
    assert result.sample.response_ids == (5, 6, 7)
    assert result.sample.response_mask == (1, 1, 1)
    assert result.sample.response_logprobs == (-0.1, -0.2, -0.3)
    assert result.finish_reason == "length" and not result.aborted


def test_each_stages_finish_reason_is_kept_with_its_output() -> None:
    """A later stage may have consumed an earlier one differently after a length cut (Qwen3-Omni's
    talker after a cut thinker): the adapter reads why each stage stopped from its ``data``."""
    engine = [RequestOutput([Completion([5, 6], None, "length")], stage_id=0),
              RequestOutput([Completion([7], None, "stop")], stage_id=1)]
    converted = [stage_output_from_engine(output)[0] for output in engine]
    assert [o.data["finish_reason"] for o in converted] == ["length", "stop"]
    assert "finish_reason" not in stage_output_from_engine(RequestOutput([Completion([5], None, None)]))[0].data


def test_n_samples_are_read_by_index() -> None:
    engine = [RequestOutput([Completion([1]), Completion([2, 3])])]
    assert convert_request(TextAdapter(), "text", [0], engine, sample_index=1
                           ).sample.response_ids == (2, 3)


def test_abort_with_empty_token_ids() -> None:
    engine = [RequestOutput([Completion([], [], "abort")])]
    result = convert_request(TextAdapter(), "text", [1], engine)
    assert result.aborted
    assert result.sample.response_ids == () and result.sample.response_logprobs == ()
    assert result.kept_outputs[0].aborted


def test_abort_with_an_empty_output_list() -> None:
    # vllm-omni#6973: an aborted request may come back with no completions at all.
    result = convert_request(TextAdapter(), "text", [1], [RequestOutput([])])
    assert result.aborted and result.sample.response_ids == ()


def test_no_engine_outputs_at_all_is_an_abort() -> None:
    result = convert_request(TextAdapter(), "text", [1], [])
    assert result.aborted and result.kept_outputs == ()


def test_combiner_keeps_every_final_stage_and_policy_stage_is_the_response() -> None:
    engine = [RequestOutput([Completion([4, 5])], stage_id=0),
              RequestOutput([Completion([900, 901, 902])], stage_id=1)]
    result = convert_request(TwoFinalAdapter(), "both", [1], engine)
    assert [o.stage_id for o in result.kept_outputs] == [0, 1]
    assert result.sample.response_ids == (4, 5)
    assert result.sample.response_logprobs is None


def test_combiner_with_aborted_talker_keeps_thinker_response() -> None:
    engine = [RequestOutput([Completion([4])], stage_id=0), RequestOutput([], stage_id=1)]
    result = convert_request(TwoFinalAdapter(), "both", [1], engine)
    assert result.sample.response_ids == (4,) and not result.aborted
    assert result.kept_outputs[1].aborted


def test_engine_neutral_stage_outputs_pass_through() -> None:
    output = StageOutput(0, (3, 4), (math.log(0.5), math.log(0.25)))
    result = convert_request(TextAdapter(), "text", [1], [output])
    assert result.sample.response_logprobs == pytest.approx((-0.6931, -1.3863), abs=1e-4)
    aborted, reason = stage_output_from_engine(StageOutput(0, (), aborted=True))
    assert aborted.aborted and reason == "abort"


def test_missing_sampled_token_logprob_is_an_error() -> None:
    engine = [RequestOutput([Completion([5], [{6: Logprob(-1.0)}])])]
    with pytest.raises(SchemaError, match="sampled token 5 has no log-prob"):
        convert_request(TextAdapter(), "text", [1], engine)


def test_logprob_count_mismatch_is_an_error() -> None:
    engine = [RequestOutput([Completion([5, 6], [{5: Logprob(-1.0)}])])]
    with pytest.raises(SchemaError, match="1 log-prob entries for 2 tokens"):
        convert_request(TextAdapter(), "text", [1], engine)
