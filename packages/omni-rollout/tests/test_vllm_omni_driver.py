"""The one vLLM-Omni driver against a recording ``AsyncOmni`` (``omni_rollout.vllm_omni.testing``).

Covered: per-stage sampling params, the engine prompt (pad dedup, media, refused keys), only
the policy stage's outputs reach a vLLM-style caller, prompt log-probs checked against the ids
sent, stage RPC failures raise, the cache clearing that ``AsyncOmni.reset_prefix_cache`` (a
no-op) cannot do, sleep/wake, and the in-flight table verl reads. verl's own server code runs
against the driver in apps/trainer/tests/engines/verl/test_verl_wiring.py; the real AsyncOmni on a GPU in
tests/gpu/test_vllm_omni_rollout.py. Needs vLLM for ``SamplingParams`` (gpu extra).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from omni_contracts import RolloutAdapter, StageConfig
from omni_rollout.vllm_omni import (
    EngineOutputError,
    PromptLogprobsError,
    StageRpcError,
    UnsupportedByVllmOmniError,
    VllmOmniDriver,
)
from omni_rollout.vllm_omni.testing import RecordingAsyncOmni

vllm_sampling = pytest.importorskip("vllm.sampling_params", reason="needs the gpu extra")
SamplingParams = vllm_sampling.SamplingParams
FINAL_ONLY = vllm_sampling.RequestOutputKind.FINAL_ONLY
PAD = 9


class ChainAdapter(RolloutAdapter):
    """``text``: one stage. ``chain``: policy ``policy`` of stages 0 -> 1 -> 2, syncing 0 and 1."""

    modes = ("text", "chain")

    def __init__(self, policy: int = 0) -> None:
        self.policy = policy

    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        if mode == "text":
            return (StageConfig(0, "LM", "text", final_output=True),)
        return (StageConfig(0, "LM", "text", final_output=True),
                StageConfig(1, "Talker", "codec", inputs=(0,)),
                StageConfig(2, "Vocoder", "audio", final_output=True, inputs=(1,)))

    def rollout_flags(self, mode: str) -> dict[int, dict[str, object]]:
        return {}

    def get_pipeline_id(self, mode: str) -> str:
        return f"fake_{mode}"

    def policy_stage_id(self, mode: str) -> int:
        return self.policy if mode == "chain" else 0

    def weight_sync_stage_ids(self, mode: str) -> tuple[int, ...]:
        return (0, 1) if mode == "chain" else (0,)


def dedup(ids: Sequence[int]) -> list[int]:
    """Collapse runs of the pad token, as a processor's ``dedup_pad_tokens`` does."""
    return [t for i, t in enumerate(ids) if not (t == PAD and i and ids[i - 1] == PAD)]


def output(stage_id: int, token_ids: list[int], **extra: Any) -> Any:
    completion = SimpleNamespace(token_ids=token_ids, logprobs=None, finish_reason="stop")
    return SimpleNamespace(stage_id=stage_id, outputs=[completion], finished=True, error=None, **extra)


def make(mode: str = "chain", policy: int = 0, **fake: Any) -> tuple[VllmOmniDriver, RecordingAsyncOmni]:
    stages = 1 if mode == "text" else 3
    omni = RecordingAsyncOmni([SamplingParams(max_tokens=100 + i) for i in range(stages)], **fake)
    return VllmOmniDriver(omni, ChainAdapter(policy), mode, dedup_pad_tokens=dedup), omni


async def drain(
    driver: VllmOmniDriver, prompt: dict[str, Any], params: Any, request_id: str = "r", *, lora_request: Any = None
) -> list[Any]:
    return [o async for o in driver.generate(prompt, params, request_id, lora_request=lora_request)]


def test_policy_stage_gets_the_callers_params_reporting_once() -> None:
    driver, omni = make(respond=lambda *_: [output(0, [5]), output(2, [6])])
    caller = SamplingParams(max_tokens=7, repetition_penalty=1.3, ignore_eos=True, seed=11)
    outputs = asyncio.run(drain(driver, {"prompt_token_ids": [1, PAD, PAD, PAD, 2],
                                         "multi_modal_data": {"image": ["img"]}}, caller))
    call = omni.calls[0][1]
    policy, talker, vocoder = call["sampling_params_list"]
    assert (policy.max_tokens, policy.repetition_penalty, policy.ignore_eos, policy.seed) == (7, 1.3, True, 11)
    assert policy.output_kind == FINAL_ONLY and caller.output_kind != FINAL_ONLY  # a copy, caller untouched
    assert (talker.max_tokens, vocoder.max_tokens) == (101, 102)  # deploy defaults ...
    assert talker.output_kind == vocoder.output_kind == FINAL_ONLY  # ... reporting once
    # The pad run collapses to one (vLLM expands it again from the media); media pass through.
    assert call["prompt"] == {"prompt_token_ids": [1, PAD, 2], "multi_modal_data": {"image": ["img"]}}
    # Only the policy stage's output reaches a vLLM-style caller (the vocoder's is dropped).
    assert [o.stage_id for o in outputs] == [0]


def retryable_error(stage_id: int = 0) -> Any:
    """What vLLM's engine core returns for a multimodal cache miss: finished, no tokens, error."""
    completion = SimpleNamespace(token_ids=[], logprobs=None, finish_reason="error")
    return SimpleNamespace(stage_id=stage_id, outputs=[completion], finished=True, error=None)


def test_a_retryable_engine_error_is_sent_again_with_the_media_and_never_yielded() -> None:
    """The cache-drift error (no tokens, finish_reason='error') reached verl's agent loop as an
    empty sample before; the driver sends the request again once, the frontend cache cleared."""
    answers = iter([[retryable_error()], [output(0, [5, 6])]])
    driver, omni = make(mode="text", respond=lambda *_: next(answers))
    outputs = asyncio.run(drain(driver, {"prompt_token_ids": [1, PAD, 2], "multi_modal_data": {"image": ["img"]}},
                                SamplingParams(max_tokens=4)))
    assert [o.outputs[0].token_ids for o in outputs] == [[5, 6]]
    assert omni.names() == ["generate", "frontend clear_mm_cache", "generate"]
    assert driver.engine_retries == 1


def test_a_retryable_engine_error_that_persists_raises() -> None:
    driver, omni = make(mode="text", respond=lambda *_: [retryable_error()])
    with pytest.raises(EngineOutputError, match="finish_reason='error' and no tokens 2 times.*not a sample"):
        asyncio.run(drain(driver, {"prompt_token_ids": [1]}, SamplingParams(max_tokens=4)))
    assert omni.names() == ["generate", "frontend clear_mm_cache", "generate"]


def test_prompt_keys_the_driver_would_drop_are_refused() -> None:
    driver, omni = make()
    with pytest.raises(ValueError, match=r"token prompts only.*\['cache_salt'\]"):
        asyncio.run(drain(driver, {"prompt_token_ids": [1], "cache_salt": "x"}, SamplingParams()))
    assert omni.calls == []


def test_an_engine_error_output_raises_instead_of_reading_as_an_abort() -> None:
    failed = SimpleNamespace(stage_id=0, outputs=[], finished=True, error="stage 0 died")
    driver, _ = make(respond=lambda *_: [failed])
    with pytest.raises(EngineOutputError, match="stage 0 died"):
        asyncio.run(drain(driver, {"prompt_token_ids": [1]}, SamplingParams()))


def test_requested_prompt_logprobs_must_cover_exactly_the_ids_sent() -> None:
    sent = [1, PAD, PAD, 2]
    # vLLM's layout: None for the first position, then each position's own token first.
    entries = [None] + [{t: SimpleNamespace(logprob=-0.5, rank=1)} for t in sent[1:]]
    good = output(0, [3], prompt_token_ids=sent, prompt_logprobs=entries)
    driver, _ = make(respond=lambda *_: [good])
    (out,) = asyncio.run(drain(driver, {"prompt_token_ids": sent}, SamplingParams(max_tokens=1, prompt_logprobs=0)))
    assert out is good
    # The engine expanded the pad to 3 tokens where the caller had 2: rows would misalign.
    expanded = output(0, [3], prompt_token_ids=[1, PAD, PAD, PAD, 2], prompt_logprobs=[None] + entries[1:] * 2)
    driver, _ = make(respond=lambda *_: [expanded])
    with pytest.raises(PromptLogprobsError, match="expanded the media placeholders differently"):
        asyncio.run(drain(driver, {"prompt_token_ids": sent}, SamplingParams(max_tokens=1, prompt_logprobs=0)))
    # Top-2 asked, rank 2 missing at position 1.
    thin = output(0, [3], prompt_token_ids=sent, prompt_logprobs=entries)
    driver, _ = make(respond=lambda *_: [thin])
    with pytest.raises(PromptLogprobsError, match=r"Position 1: .*top-2 lacks ranks \[2\]"):
        asyncio.run(drain(driver, {"prompt_token_ids": sent}, SamplingParams(max_tokens=1, prompt_logprobs=2)))


def test_lora_for_a_policy_stage_other_than_zero_is_refused() -> None:
    driver, omni = make(policy=1)
    with pytest.raises(UnsupportedByVllmOmniError, match="LoRA to stage 0 only"):
        asyncio.run(drain(driver, {"prompt_token_ids": [1]}, SamplingParams(), lora_request=object()))
    assert omni.calls == []


def test_stage_rpc_goes_to_the_sync_stages_and_raises_on_a_failure() -> None:
    driver, omni = make()
    assert asyncio.run(driver.collective_rpc("update_weights_from_ipc", kwargs={"x": 1})) == [[None]]
    assert omni.calls[-1][1]["stage_ids"] == [0, 1]  # the adapter's weight-sync stages
    omni.rpc_results["boom"] = [[None], {"supported": False, "error": "KeyError: 'w'"}]  # the stage pool's shape
    with pytest.raises(StageRpcError, match=r"'boom'.*stages \[0\].*KeyError"):
        asyncio.run(driver.collective_rpc("boom", stage_ids=[0]))
    omni.rpc_results["silent"] = []
    with pytest.raises(StageRpcError, match="no stage answered"):
        asyncio.run(driver.collective_rpc("silent"))
    omni.rpc_results["list_loras"] = [[{3}, {4}], {"supported": False, "error": "no lora"}]
    with pytest.raises(StageRpcError, match="no lora"):
        asyncio.run(driver.list_loras())
    omni.rpc_results["list_loras"] = [[{3}, {4}]]  # one replica, two workers
    assert asyncio.run(driver.list_loras()) == {3, 4}


def test_reset_prefix_cache_clears_through_pause_and_restores_the_running_state() -> None:
    driver, omni = make()
    assert asyncio.run(driver.reset_prefix_cache(reset_connector=True)) is True
    # The clearing call on the policy + weight-sync stages (never AsyncOmni's no-op), the
    # frontend's multimodal cache with them (its next request would otherwise send a hash the
    # stages forgot), then admission reopens on them, as before the call.
    assert omni.calls == [
        ("pause_generation", {"mode": "abort", "clear_cache": True, "stage_ids": [0, 1]}),
        ("frontend clear_mm_cache", {}),
        ("resume_generation", {"stage_ids": [0, 1]}),
    ]
    assert not omni.paused
    asyncio.run(driver.reset_encoder_cache())  # AsyncOmni's is a no-op too: same clearing path
    assert omni.names()[3:] == ["pause_generation", "frontend clear_mm_cache", "resume_generation"]
    asyncio.run(driver.reset_mm_cache())  # the frontend's alone (AsyncOmni's clears nothing)
    assert omni.names()[6:] == ["frontend clear_mm_cache"]


def test_reset_prefix_cache_on_a_paused_engine_leaves_it_paused() -> None:
    driver, omni = make()
    omni.paused = True  # e.g. after verl's abort_all_requests
    omni.request_states["late-fake"] = SimpleNamespace(external_request_id="late")  # aborted, not yet reaped
    asyncio.run(driver.reset_prefix_cache())
    assert omni.names() == ["pause_generation", "frontend clear_mm_cache"] and omni.paused


def test_reset_prefix_cache_refuses_to_abort_running_requests() -> None:
    driver, omni = make()
    omni.request_states["r-fake"] = SimpleNamespace(external_request_id="r")
    with pytest.raises(RuntimeError, match="1 request.* in flight on a running engine"):
        asyncio.run(driver.reset_prefix_cache())
    assert omni.calls == []


def test_sleep_level_two_is_refused_and_wake_resumes_once_nothing_sleeps() -> None:
    driver, omni = make()
    with pytest.raises(UnsupportedByVllmOmniError, match="after level 2"):
        asyncio.run(driver.sleep(level=2))
    assert omni.calls == []
    asyncio.run(driver.sleep(level=1))
    asyncio.run(driver.wake_up(tags=["weights"]))
    assert omni.paused  # KV cache still asleep: no scheduling yet
    asyncio.run(driver.wake_up(tags=["kv_cache"]))
    # A sleeping stage drops its multimodal cache: the frontend's goes with it.
    assert not omni.paused and omni.names() == ["sleep", "frontend clear_mm_cache", "wake_up", "wake_up",
                                                "resume_generation"]


def test_in_flight_table_and_drain() -> None:
    async def scenario() -> tuple[list[str], set[str], list[Any], int]:
        driver, omni = make(respond=lambda *_: [output(0, [2])], hold=asyncio.Event())
        task = asyncio.create_task(drain(driver, {"prompt_token_ids": [1]}, SamplingParams(), "req-7"))
        while not omni.request_states:  # the request registers, then waits on the hold
            await asyncio.sleep(0)
        seen = list(driver.output_processor.request_states)  # what verl's abort_all_requests reports
        ids = driver.in_flight_request_ids()  # what abort takes
        assert omni.hold is not None
        omni.hold.set()
        await driver.wait_for_requests_to_drain(drain_timeout=60)
        return seen, ids, await task, len(driver.output_processor.request_states)

    seen, ids, outputs, left = asyncio.run(scenario())
    assert seen == ["req-7-fake"] and ids == {"req-7"} and len(outputs) == 1 and left == 0

    driver, omni = make()
    omni.request_states["stuck-fake"] = SimpleNamespace(external_request_id="stuck")
    with pytest.raises(TimeoutError, match="1 vLLM-Omni request"):
        asyncio.run(driver.wait_for_requests_to_drain(drain_timeout=0))
