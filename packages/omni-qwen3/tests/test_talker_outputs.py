"""Rollout mode ``talker``: vLLM-Omni's thinker_talker outputs of one request mapped to the
talker's sample, and the two forms of a sample's conditioning. No model is loaded."""

from __future__ import annotations

import pytest
import torch

from omni_contracts import ExtraFieldError, RolloutSample, SchemaError, StageOutput
from omni_qwen3.rollout_adapter import Qwen3OmniRolloutAdapter
from omni_qwen3.talker_adapter import Qwen3OmniTalkerAdapter
from omni_qwen3.talker_fields import (
    PREFILL_EMBEDS,
    PREFILL_POSITIONS,
    RESIDUAL_CODES,
    SOURCE_IDS,
    TRAILING_TEXT,
    TTS_PAD_EMBED,
    check_conditioning,
    missing_conditioning,
)
from omni_contracts.speech import SOURCE_TRUNCATED
from omni_qwen3.talker_outputs import SAMPLE_RATE, WAVEFORM, engine_codes, residual_codes

PROMPT = (5, 6, 7, 8)
THINKER_TEXT = (20, 21, 22, 2)  # the last one, the end of the turn, is never fed back
PREFILL = 9
TOKENS = (40, 41, 42, 99)  # 99: the end of speech
GROUPS = 4


def decode_rows(count: int) -> torch.Tensor:
    """One row per consumed token: its codec-0 token, then codebooks 1..G-1."""
    return torch.tensor([[TOKENS[t], 100 + t, 200 + t, 300 + t] for t in range(count)])


WAVE = torch.linspace(-0.5, 0.5, 48)


def outputs(codes: object, *, thinker: tuple[int, ...] = THINKER_TEXT, placeholder: int = PREFILL,
            thinker_finish: str = "stop") -> list[StageOutput]:
    return [
        StageOutput(0, thinker, data={"prompt_token_ids": PROMPT, "finish_reason": thinker_finish}),
        StageOutput(1, TOKENS, (-1.0, -2.0, -3.0, -0.5),
                    data={"prompt_token_ids": (0,) * placeholder, "multimodal_output": {"codes": {"audio": codes}}}),
        StageOutput(2, data={"multimodal_output": {"audio": [WAVE[:20][None], WAVE[20:][None]], "sr": torch.tensor(24000)}}),
    ]


def talker_sample(stage_outputs: list[StageOutput]) -> RolloutSample:
    adapter = Qwen3OmniRolloutAdapter()
    kept = adapter.combine_engine_outputs(stage_outputs, "talker")
    policy = next(o for o in kept if o.stage_id == 1)
    base = RolloutSample(PROMPT, policy.token_ids, (1,) * len(policy.token_ids), policy.logprobs)
    return adapter.postprocess_agent_loop_output(base, kept, "talker")


@pytest.mark.parametrize(
    "codes",
    [
        torch.cat([torch.zeros(PREFILL, GROUPS, dtype=torch.long), decode_rows(3)]),  # prefill rows reported
        decode_rows(3),  # decode rows only
        decode_rows(3).T,  # codebooks first
        decode_rows(3).tolist(),  # a nested list
    ],
    ids=["with-prefill", "decode-only", "transposed", "list"],
)
def test_the_talker_sample_holds_its_tokens_codes_and_source(codes: object) -> None:
    sample = talker_sample(outputs(codes))
    assert sample.prompt_ids == (0,) * PREFILL  # the talker's prefill length, for the actor's rows
    assert sample.response_ids == TOKENS and sample.response_logprobs == (-1.0, -2.0, -3.0, -0.5)
    assert sample.extra_fields[SOURCE_IDS].tolist() == list(PROMPT + THINKER_TEXT[:-1])
    residual = sample.extra_fields[RESIDUAL_CODES]
    assert residual.tolist() == [[100, 200, 300], [101, 201, 301], [102, 202, 302], [-1, -1, -1]]
    assert torch.equal(sample.extra_fields[WAVEFORM], WAVE) and sample.extra_fields[SAMPLE_RATE] == 24000
    sample.validate_extra_fields(Qwen3OmniTalkerAdapter.extra_field_specs)
    check_conditioning(sample.extra_fields, "sample")


def test_a_thinker_cut_at_its_length_limit_is_flagged_and_kept_out_of_training(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """vLLM-Omni's thinker -> talker hand-off drops the last thinker row, taking it for the
    end-of-turn token's; after a length cut it is a text token's, so the talker was conditioned
    one row short of the stored source and the actor's log-probs would silently differ."""
    spoken = talker_sample(outputs(decode_rows(3)))
    assert spoken.response_mask == (1, 1, 1, 1) and spoken.extra_fields[SOURCE_TRUNCATED] is False
    cut_text = (20, 21, 22, 23)  # no end of turn: the limit cut the answer
    with caplog.at_level("WARNING", logger="omni_qwen3.talker_outputs"):
        cut = talker_sample(outputs(decode_rows(3), thinker=cut_text, thinker_finish="length"))
    assert cut.response_mask == (0, 0, 0, 0) and cut.extra_fields[SOURCE_TRUNCATED] is True
    assert cut.response_ids == TOKENS and cut.response_logprobs == spoken.response_logprobs  # kept for the reward
    assert "hit its length limit" in caplog.text and "masked out of training" in caplog.text
    cut.validate_extra_fields(Qwen3OmniTalkerAdapter.extra_field_specs)


def test_a_row_for_every_token_fills_every_residual() -> None:
    residual = residual_codes(decode_rows(4), TOKENS, PREFILL)
    assert residual[-1].tolist() == [103, 203, 303]


@pytest.mark.parametrize(
    "codes",
    [
        decode_rows(3)[[1, 0, 2]],  # rows out of order
        decode_rows(2),  # a row short
        torch.cat([torch.zeros(PREFILL - 1, GROUPS, dtype=torch.long), decode_rows(3)]),  # a prefill row short
    ],
    ids=["shuffled", "short", "prefill-short"],
)
def test_codes_that_do_not_line_up_are_refused(codes: torch.Tensor) -> None:
    with pytest.raises(SchemaError, match=r"do not line up with its 4 codec-0 tokens"):
        talker_sample(outputs(codes))


def test_missing_pieces_are_refused_naming_them() -> None:
    with pytest.raises(SchemaError, match="no multimodal_output codes.audio"):
        talker_sample([outputs(decode_rows(3))[0], StageOutput(1, TOKENS, data={"prompt_token_ids": (0,) * PREFILL})])
    with pytest.raises(SchemaError, match="carries no prompt_token_ids"):
        talker_sample(outputs(decode_rows(3), placeholder=0))
    with pytest.raises(SchemaError, match="thinker gave no text to speak"):
        talker_sample(outputs(decode_rows(3), thinker=(2,)))
    with pytest.raises(SchemaError, match="thinker's output .stage 0. is missing"):
        talker_sample(outputs(decode_rows(3))[1:])


def test_a_missing_waveform_is_kept_as_none_for_the_reward_to_count() -> None:
    stage_outputs = outputs(decode_rows(3))
    for vocoder in (None, StageOutput(2, aborted=True), StageOutput(2, data={"multimodal_output": {"sr": 24000}})):
        sample = talker_sample(stage_outputs[:2] + ([vocoder] if vocoder is not None else []))
        assert (sample.extra_fields[WAVEFORM], sample.extra_fields[SAMPLE_RATE]) == (None, None)
    with pytest.raises(SchemaError, match="no sample rate"):
        talker_sample(stage_outputs[:2] + [StageOutput(2, data={"multimodal_output": {"audio": WAVE}})])


def test_an_aborted_talker_passes_through_unchanged() -> None:
    aborted = [outputs(decode_rows(3))[0], StageOutput(1, (), aborted=True)]
    sample = talker_sample(aborted)
    assert sample.response_ids == () and RESIDUAL_CODES not in sample.extra_fields


def test_engine_codes_reads_the_nested_and_the_flat_key() -> None:
    codes = decode_rows(3)
    assert torch.equal(engine_codes({"codes": {"audio": codes}}), codes)  # type: ignore[arg-type]
    assert torch.equal(engine_codes({"codes.audio": codes[None]}), codes)  # type: ignore[arg-type]
    assert engine_codes({}) is None and engine_codes({"audio": codes}) is None
    with pytest.raises(SchemaError, match=r"expected \[rows, codebooks\]"):
        engine_codes({"codes": {"audio": torch.zeros(5)}})


def test_a_sample_holds_its_conditioning_stored_or_as_its_source() -> None:
    stored = {key: torch.zeros(1) for key in (PREFILL_EMBEDS, PREFILL_POSITIONS, TRAILING_TEXT, TTS_PAD_EMBED)}
    assert missing_conditioning(stored) == []
    assert missing_conditioning({SOURCE_IDS: torch.zeros(3)}) == []
    assert missing_conditioning({RESIDUAL_CODES: torch.zeros(1)}) == [SOURCE_IDS]
    partial = {k: v for k, v in stored.items() if k != TRAILING_TEXT}
    assert missing_conditioning({**partial, SOURCE_IDS: torch.zeros(3)}) == [TRAILING_TEXT]
    with pytest.raises(ExtraFieldError, match=r"sample 3: .*missing qwen3_omni\.talker_source_ids"):
        check_conditioning({RESIDUAL_CODES: torch.zeros(1)}, "sample 3")


def test_the_actor_refuses_a_row_without_conditioning() -> None:
    micro_batch = {RESIDUAL_CODES: [torch.zeros(2, 3, dtype=torch.long)], "response_lengths": [2]}
    with pytest.raises(ExtraFieldError, match=r"micro-batch row 0: .*missing qwen3_omni\.talker_source_ids"):
        Qwen3OmniTalkerAdapter().prepare_model_inputs({}, micro_batch, None)
