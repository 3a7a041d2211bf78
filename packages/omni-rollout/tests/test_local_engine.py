"""The local engine on a tiny causal LM built offline, and the agent loops."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch

from omni_contracts import (
    ExtraFieldError,
    ExtraFieldSpec,
    RolloutAdapter,
    RolloutSample,
    SchemaError,
    StageConfig,
    StageOutput,
)
from omni_rollout.agent_loops import get_agent_loop
from omni_rollout.local_engine import LocalEngine, batch_prompts, find_policy_module
from omni_rollout.sampling import SamplingSettings

VOCAB = 40


class TextAdapter(RolloutAdapter):
    modes = ("text",)

    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        self.check_mode(mode)
        return [StageConfig(0, "Qwen2ForCausalLM", "text", final_output=True)]

    def rollout_flags(self, mode: str) -> dict[int, dict[str, object]]:
        return {}

    def get_pipeline_id(self, mode: str) -> str:
        return "tiny"


CODES = ExtraFieldSpec("talky.codes", ("response_length", 2))


class TalkerAdapter(TextAdapter):
    """Pretends stage 0 is a talker whose codes must travel as a namespaced field."""

    def postprocess_agent_loop_output(
        self, sample: RolloutSample, outputs: Sequence[StageOutput], mode: str
    ) -> RolloutSample:
        codes = [[t, t] for t in sample.response_ids]
        return RolloutSample(sample.prompt_ids, sample.response_ids, sample.response_mask,
                             sample.response_logprobs, {CODES.key: codes})


@pytest.fixture(scope="module")
def model() -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, eos_token_id=1)
    return Qwen2ForCausalLM(config).eval()


def prompt(*ids: int) -> dict[str, torch.Tensor]:
    tensor = torch.tensor([ids])
    return {"input_ids": tensor, "attention_mask": torch.ones_like(tensor)}


def engine(model: Any) -> LocalEngine:
    return LocalEngine(find_policy_module(model, TextAdapter(), "text"), eos_token_ids=(1,), pad_token_id=0)


def test_log_probs_are_those_of_the_processed_distribution(model: Any) -> None:
    sampling = SamplingSettings(n=3, temperature=0.7, top_k=5, max_new_tokens=6, seed=1)
    (rollout,) = engine(model).generate([prompt(5, 6, 7)], sampling)
    for output in rollout.outputs:
        ids = torch.tensor([[5, 6, 7, *output.token_ids]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, 2:-1] / 0.7  # positions predicting the response
        kth = logits.topk(5, dim=-1).values[:, -1:]
        processed = logits.masked_fill(logits < kth, float("-inf"))
        expected = torch.log_softmax(processed, -1).gather(-1, torch.tensor(output.token_ids)[:, None]).squeeze(-1)
        assert output.logprobs is not None
        torch.testing.assert_close(torch.tensor(output.logprobs), expected, rtol=0, atol=1e-5)


def test_the_checkpoints_generation_defaults_do_not_change_the_sampled_distribution(model: Any) -> None:
    """A ``generation_config.json`` with a repetition penalty (or an n-gram ban, a minimum
    length) would make ``generate`` sample from a distribution the actor never computes."""
    from transformers import GenerationConfig

    saved = model.generation_config
    model.generation_config = GenerationConfig(
        repetition_penalty=3.0, no_repeat_ngram_size=1, min_new_tokens=6, num_beams=3, eos_token_id=1, pad_token_id=0
    )
    try:
        (rollout,) = engine(model).generate([prompt(5, 6, 7)], SamplingSettings(n=4, max_new_tokens=6, seed=3))
    finally:
        model.generation_config = saved
    for output in rollout.outputs:
        ids = torch.tensor([[5, 6, 7, *output.token_ids]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, 2:-1]
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(output.token_ids)[:, None]).squeeze(-1)
        assert output.logprobs is not None
        torch.testing.assert_close(torch.tensor(output.logprobs), expected, rtol=0, atol=1e-5)


def test_text_prompts_share_one_left_padded_call(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompts of different lengths in one call: each sample's log-probs are those of its own
    unpadded prompt + response, and every rollout belongs to its prompt."""
    calls: list[int] = []
    original = model.generate

    def counting(**kwargs: Any) -> Any:
        calls.append(int(kwargs["input_ids"].shape[0]))
        return original(**kwargs)

    monkeypatch.setattr(model, "generate", counting)
    prompts = [prompt(5, 6, 7, 8, 9), prompt(3), prompt(11, 12)]
    rollouts = engine(model).generate(prompts, SamplingSettings(n=2, max_new_tokens=6, seed=3))
    assert calls == [6]
    for given, rollout in zip(prompts, rollouts, strict=True):
        assert rollout.prompt_ids == tuple(given["input_ids"][0].tolist())
        for output in rollout.outputs:
            ids = torch.tensor([[*rollout.prompt_ids, *output.token_ids]])
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(rollout.prompt_ids) - 1 : -1]
            expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(output.token_ids)[:, None]).squeeze(-1)
            assert output.logprobs is not None
            torch.testing.assert_close(torch.tensor(output.logprobs), expected, rtol=0, atol=1e-4)


def test_same_seed_same_samples(model: Any) -> None:
    sampling = SamplingSettings(n=4, max_new_tokens=5, seed=7)
    first = engine(model).generate([prompt(3, 4), prompt(9)], sampling)
    again = engine(model).generate([prompt(3, 4), prompt(9)], sampling)
    other = engine(model).generate([prompt(3, 4), prompt(9)], SamplingSettings(n=4, max_new_tokens=5, seed=8))
    assert [[o.token_ids for o in r.outputs] for r in first] == [[o.token_ids for o in r.outputs] for r in again]
    assert [[o.token_ids for o in r.outputs] for r in first] != [[o.token_ids for o in r.outputs] for r in other]
    torch.manual_seed(0)
    expected = torch.rand(())
    torch.manual_seed(0)
    engine(model).generate([prompt(3)], sampling)
    assert torch.rand(()) == expected  # the caller's RNG stream is untouched


def test_finish_reasons(model: Any) -> None:
    stopping = SamplingSettings(n=4, max_new_tokens=8, stop_token_ids=tuple(range(2, VOCAB, 2)), seed=0)
    (rollout,) = engine(model).generate([prompt(5)], stopping)
    for output in rollout.outputs:
        reason = output.data["finish_reason"]
        if reason == "stop":
            assert output.token_ids[-1] in stopping.stop_token_ids or output.token_ids[-1] == 1
            assert not any(t in stopping.stop_token_ids for t in output.token_ids[:-1])
        else:
            assert len(output.token_ids) == 8
    assert any(o.data["finish_reason"] == "stop" for o in rollout.outputs)
    (long,) = engine(model).generate([prompt(5)], SamplingSettings(n=2, max_new_tokens=3, seed=0))
    assert all(len(o.token_ids) <= 3 for o in long.outputs)


def test_greedy_is_deterministic_without_a_seed(model: Any) -> None:
    greedy = SamplingSettings(n=2, temperature=0.0, max_new_tokens=4)
    (rollout,) = engine(model).generate([prompt(5, 8)], greedy)
    assert rollout.outputs[0].token_ids == rollout.outputs[1].token_ids


def test_sample_categorical_draws_from_the_distribution() -> None:
    from omni_rollout.local_engine import sample_categorical

    probs = torch.tensor([0.5, 0.0, 0.2, 0.3, 0.0])
    rows = 40_000
    torch.manual_seed(0)
    drawn = sample_categorical(probs.log().expand(rows, -1)).squeeze(-1)
    counts = torch.bincount(drawn, minlength=5).double()
    assert counts[1] == 0 and counts[4] == 0  # probability 0: never drawn
    expected = probs.double() * rows
    sigma = (expected * (1 - probs.double())).sqrt()
    assert ((counts - expected).abs() <= 5 * sigma + 1e-9).all(), counts.tolist()


def test_a_draw_rounded_past_the_end_takes_the_last_possible_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """A uniform draw that rounding puts at the row's total would land past the last entry
    of positive probability, on a suppressed token (or past the vocabulary)."""
    from omni_rollout.local_engine import sample_categorical

    monkeypatch.setattr(torch, "rand", lambda size, **kw: torch.ones(size, dtype=kw.get("dtype")))
    log_probs = torch.tensor([[0.6, 0.4, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]).log()
    assert sample_categorical(log_probs).squeeze(-1).tolist() == [1, 1]


def test_stats(model: Any) -> None:
    local = engine(model)
    local.generate([prompt(5), prompt(6)], SamplingSettings(n=2, max_new_tokens=3, seed=0))
    metrics = local.stats.metrics()
    assert metrics["rollout/samples"] == 4.0
    assert metrics["rollout/tokens_per_s"] > 0 and metrics["rollout/prompts_per_s"] > 0


def test_find_policy_module_explains_a_miss(model: Any) -> None:
    class Wrong(TextAdapter):
        def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
            return [StageConfig(0, "ThinkerForConditionalGeneration", "text", final_output=True)]

    with pytest.raises(LookupError, match=r"No submodule of Qwen2ForCausalLM is a ThinkerForConditionalGeneration"):
        find_policy_module(model, Wrong(), "text")


def test_batch_prompts_lays_out_rows_and_media_in_prompt_order() -> None:
    first = {
        "input_ids": torch.tensor([[1, 2]]), "attention_mask": torch.ones(1, 2, dtype=torch.long),
        "pixel_values": torch.ones(4, 3), "position_ids": torch.tensor([[[5, 6]]] * 3),
        "input_features": torch.ones(1, 2, 3), "feature_attention_mask": torch.ones(1, 3, dtype=torch.long),
        "use_audio_in_video": False,
    }
    second = {
        "input_ids": torch.tensor([[7, 8, 9]]), "attention_mask": torch.ones(1, 3, dtype=torch.long),
        "position_ids": torch.tensor([[[0, 1, 2]]] * 3),
        "input_features": torch.full((2, 2, 5), 2.0), "feature_attention_mask": torch.ones(2, 5, dtype=torch.long),
    }
    out = batch_prompts([first, second], 2, pad_token_id=0)
    # Rows 0-1 are the first prompt, left-padded by one; rows 2-3 the second.
    assert out["input_ids"].tolist() == [[0, 1, 2], [0, 1, 2], [7, 8, 9], [7, 8, 9]]
    assert out["attention_mask"].tolist() == [[0, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1]]
    assert out["position_ids"].shape == (3, 4, 3) and out["position_ids"][0].tolist()[1] == [1, 5, 6]
    assert out["pixel_values"].shape == (8, 3)  # only the first prompt's 4 patches, twice
    # One audio of 3 frames (twice), then two of 5 (twice): padded to 5 frames, in that order.
    assert out["input_features"].shape == (6, 2, 5)
    assert out["feature_attention_mask"].sum(-1).tolist() == [3, 3, 5, 5, 5, 5]
    assert out["input_features"][:2, :, 3:].abs().sum() == 0 and out["input_features"][2:].eq(2).all()
    assert out["use_audio_in_video"] is False
    with pytest.raises(ValueError, match="Prompt 0: input_ids has batch size 2; pass one prompt at a time"):
        batch_prompts([{"input_ids": torch.ones(2, 2), "attention_mask": torch.ones(2, 2)}], 2, pad_token_id=0)
    with pytest.raises(ValueError, match="Prompts disagree on 'use_audio_in_video'"):
        batch_prompts([first, {**second, "use_audio_in_video": True}], 1, pad_token_id=0)


def test_prompts_per_call_splits_calls_and_seeds_each_by_its_first_prompt(
    model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    original = model.generate

    def counting(**kwargs: Any) -> Any:
        calls.append(int(kwargs["input_ids"].shape[0]))
        return original(**kwargs)

    monkeypatch.setattr(model, "generate", counting)
    split = LocalEngine(model, eos_token_ids=(1,), pad_token_id=0, prompts_per_call=2)
    sampling = SamplingSettings(n=2, max_new_tokens=4, seed=5)
    rollouts = split.generate([prompt(3), prompt(4, 5), prompt(6)], sampling)
    assert calls == [4, 2]
    # The third prompt's call starts at index 2, so it is seeded as that prompt alone at seed + 2.
    (alone,) = engine(model).generate([prompt(6)], SamplingSettings(n=2, max_new_tokens=4, seed=7))
    assert [o.token_ids for o in rollouts[2].outputs] == [o.token_ids for o in alone.outputs]


def test_single_turn_and_aborts() -> None:
    loop = get_agent_loop("single_turn_agent")
    output = StageOutput(0, (4, 5, 1), (-0.1, -0.2, -0.3), data={"finish_reason": "stop"})
    sample = loop(prompt_ids=[7, 8], outputs=[output], adapter=TextAdapter(), mode="text", specs={})
    assert sample.response_ids == (4, 5, 1) and sample.response_mask == (1, 1, 1)
    assert sample.response_logprobs == (-0.1, -0.2, -0.3)
    assert sample.extra_fields == {"finish_reason": "stop"}
    for outputs in ([], [StageOutput(0, aborted=True, finished=False)]):
        aborted = loop(prompt_ids=[7], outputs=outputs, adapter=TextAdapter(), mode="text", specs={})
        assert aborted.response_ids == () and aborted.extra_fields == {"aborted": True}


def test_omni_single_turn_validates_the_adapter_output() -> None:
    loop = get_agent_loop("omni_single_turn")
    output = StageOutput(0, (4, 5), (-0.1, -0.2))
    sample = loop(prompt_ids=[7], outputs=[output], adapter=TalkerAdapter(), mode="text", specs={CODES.key: CODES})
    assert sample.extra_fields[CODES.key] == [[4, 4], [5, 5]]
    wrong = ExtraFieldSpec("talky.codes", ("response_length", 3))
    with pytest.raises(ExtraFieldError, match=r"'talky.codes' has shape \(2, 2\), expected \(response_length, 3\)"):
        loop(prompt_ids=[7], outputs=[output], adapter=TalkerAdapter(), mode="text", specs={CODES.key: wrong})
    with pytest.raises(ExtraFieldError, match=r"'talky.codes' is not declared"):
        loop(prompt_ids=[7], outputs=[output], adapter=TalkerAdapter(), mode="text", specs={})

    class Misaligned(TalkerAdapter):
        def postprocess_agent_loop_output(
            self, sample: RolloutSample, outputs: Sequence[StageOutput], mode: str
        ) -> RolloutSample:
            object.__setattr__(sample, "response_mask", (1,))
            return sample

    with pytest.raises(SchemaError, match=r"\{'response_mask': 1\} do not align with 2 response_ids"):
        loop(prompt_ids=[7], outputs=[output], adapter=Misaligned(), mode="text", specs={})


def test_unknown_agent_loop() -> None:
    with pytest.raises(ValueError, match=r"Unknown agent loop 'tool_agent'; registered: omni_single_turn"):
        get_agent_loop("tool_agent")


def test_sampling_settings_report_every_problem() -> None:
    with pytest.raises(ValueError, match=r"n must be >= 1, got 0; top_k must be -1 \(off\) or >= 1, got 0"):
        SamplingSettings(n=0, top_k=0)


def test_generates_in_eval_mode_and_restores_the_mode(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A policy left in training mode by the update samples without dropout and with its KV
    cache (transformers drops the cache in training mode under gradient checkpointing)."""
    modes: list[bool] = []
    original = model.generate

    def recording(**kwargs: Any) -> Any:
        modes.append(model.training)
        return original(**kwargs)

    monkeypatch.setattr(model, "generate", recording)
    model.train()
    try:
        engine(model).generate([prompt(3, 4)], SamplingSettings(n=2, max_new_tokens=3, seed=0))
        assert modes == [False] and model.training
    finally:
        model.eval()


@pytest.mark.parametrize("autocast", [None, torch.bfloat16])
def test_generates_in_the_autocast_dtype_when_given(model: Any, autocast: torch.dtype | None) -> None:
    """A full fine-tune's policy keeps float32 weights and computes in bf16: the rollout
    samples under the same autocast as the actor's forward (else in the weights' fp32)."""
    seen: list[torch.dtype] = []
    head = model.get_output_embeddings()
    hook = head.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    try:
        sampler = LocalEngine(find_policy_module(model, TextAdapter(), "text"), eos_token_ids=(1,), pad_token_id=0,
                              autocast_dtype=autocast)
        (rollout,) = sampler.generate([prompt(3, 4)], SamplingSettings(n=1, max_new_tokens=3, seed=0))
    finally:
        hook.remove()
    assert seen and set(seen) == {autocast or torch.float32}
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the weights are untouched
    assert rollout.outputs[0].logprobs is not None and torch.isfinite(torch.tensor(rollout.outputs[0].logprobs)).all()
