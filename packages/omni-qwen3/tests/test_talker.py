"""The talker stage on the tiny Qwen3-Omni: thinker -> talker -> code predictor -> code2wav
sampling, and the actor's teacher-forced codec-0 log-probs against the sampler's (fp32, CPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from omni_contracts import ExtraFieldError, testing
from omni_contracts.speech import SpeechPolicy
from omni_qwen3.talker_adapter import (
    PREFILL_EMBEDS,
    RESIDUAL_CODES,
    TALKER_FIELDS,
    Qwen3OmniTalkerAdapter,
)
from omni_qwen3.training_adapter import ARCHITECTURE

pytestmark = pytest.mark.slow

SPOKEN = "Three apples and two pears."


@pytest.fixture(scope="module")
def talker(tiny_path: Path) -> Any:
    from omni_qwen3.talker_policy import Qwen3OmniTalkerPolicy

    return Qwen3OmniTalkerPolicy.from_pretrained(tiny_path).eval()


def spoken_sequence(tiny_path: Path, tiny_config: Any, media: Any = None) -> tuple[torch.Tensor, dict[str, Any]]:
    """The chat prompt (a question, with a picture and a tone when ``media`` is given), then
    the assistant turn holding :data:`SPOKEN` (no end-of-turn token)."""
    processor = Qwen3OmniTalkerAdapter().configure_processor(str(tiny_path), tiny_config)
    content: list[dict[str, Any]] = [{"type": "text", "text": "How many fruits?"}]
    kwargs: dict[str, Any] = {}
    if media is not None:
        content = [{"type": "image"}, {"type": "audio"}, *content]
        kwargs = {"images": [media.picture()], "audio": [media.tone(1.0)]}
    text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False)
    inputs = dict(processor(text=[text], return_tensors="pt", **kwargs))
    answer = torch.tensor([processor.tokenizer.encode(SPOKEN)])
    sequence = torch.cat([inputs.pop("input_ids"), answer], dim=1)
    inputs.pop("attention_mask")
    return sequence, inputs


def actor_log_probs(tiny_path: Path, samples: list[Any]) -> torch.Tensor:
    """The local engine's actor on the samples: prompt = talker prefill ids, response =
    codec-0 tokens, the extra fields batched as the trainer batches them."""
    from omni_training.actor import Actor
    from omni_training.batching import MicroBatch, collate
    from omni_training.policy_loss import PolicyLossConfig
    from omni_training.settings import NO_LORA, ActorSettings, OptimizerSettings

    settings = ActorSettings(
        loss_mode="vanilla", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"), gradient_checkpointing=False
    )
    actor = Actor.from_pretrained(
        str(tiny_path), Qwen3OmniTalkerAdapter(), settings=settings, lora=NO_LORA, optim=OptimizerSettings(lr=1e-6)
    )
    prompts = [{"input_ids": torch.tensor([s.prompt_ids]), "attention_mask": torch.ones(1, len(s.prompt_ids))} for s in samples]
    inputs, responses, mask = collate(prompts, [s.response_ids for s in samples], pad_token_id=0)
    extra = {key: [s.extra_fields[key] for s in samples] for key in TALKER_FIELDS if key in samples[0].extra_fields}
    (log_probs,) = actor.compute_log_probs([MicroBatch(inputs, responses, mask, extra=extra)])
    return log_probs * mask


def test_talker_adapter_passes_the_contract_kit(talker: Any, full_model: Any, tiny_config: Any) -> None:
    adapter = Qwen3OmniTalkerAdapter()
    testing.check_training_registration(Qwen3OmniTalkerAdapter, ARCHITECTURE, "talker")
    testing.check_no_split_modules(talker)
    testing.check_no_rebound_methods(talker)
    testing.check_extra_field_keys(TALKER_FIELDS)
    assert isinstance(talker, adapter.policy_class(tiny_config))
    assert isinstance(talker, SpeechPolicy)  # what the local engine samples through
    assert talker.speech_sample_rate == 100  # 12.5 codec frames a second x the tiny code2wav's 8x upsampling
    assert talker._no_split_modules == ["Qwen3OmniMoeTalkerDecoderLayer"]
    # The whole checkpoint under its own names: weights load by name and sync unchanged.
    expected = full_model.state_dict()
    loaded = talker.state_dict()
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], expected[k]) for k in loaded)


def test_only_the_talker_decoder_and_codec_head_train(tiny_path: Path, tiny_config: Any) -> None:
    from omni_qwen3.talker_policy import Qwen3OmniTalkerPolicy

    model = Qwen3OmniTalkerPolicy.from_pretrained(tiny_path)
    Qwen3OmniTalkerAdapter().configure_model(model, tiny_config)
    trainable = {name.split(".")[0] + "." + name.split(".")[1] for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"talker.model", "talker.codec_head"}
    with pytest.raises(TypeError, match=r"Qwen3OmniTalkerPolicy.from_pretrained\(path\)"):
        from omni_qwen3.thinker_policy import Qwen3OmniThinkerPolicy

        Qwen3OmniTalkerAdapter().configure_model(Qwen3OmniThinkerPolicy.from_pretrained(tiny_path), tiny_config)


@pytest.mark.parametrize("with_media", [False, True], ids=["text", "image+audio"])
def test_rollout_and_actor_log_probs_agree(
    talker: Any, tiny_path: Path, tiny_config: Any, media: Any, with_media: bool
) -> None:
    from omni_training.consistency import rollout_actor_consistency

    torch.manual_seed(0)
    sequence, inputs = spoken_sequence(tiny_path, tiny_config, media if with_media else None)
    samples = talker.sample_speech(sequence, n=4, max_new_tokens=24, media=inputs)
    assert len(samples) == 4
    assert len({tuple(s.response_ids) for s in samples}) > 1  # sampled, not one greedy answer
    groups = tiny_config.talker_config.num_code_groups
    for sample in samples:
        length = len(sample.response_ids)
        assert length == len(sample.response_logprobs) > 0
        assert sample.extra_fields[RESIDUAL_CODES].shape == (length, groups - 1)
        assert sample.extra_fields[PREFILL_EMBEDS].shape[0] == len(sample.prompt_ids)
        assert not set(sample.response_ids) & set(talker.suppressed_codec_ids)
        assert sample.waveform.ndim == 1 and sample.waveform.numel() > 0 and torch.isfinite(sample.waveform).all()
    recomputed = actor_log_probs(tiny_path, samples)
    width = recomputed.shape[1]
    rollout = torch.tensor([s.response_logprobs + [0.0] * (width - len(s.response_ids)) for s in samples])
    mask = torch.tensor([[1.0] * len(s.response_ids) + [0.0] * (width - len(s.response_ids)) for s in samples])
    metrics = rollout_actor_consistency(rollout, recomputed, mask)
    assert metrics["training/rollout_actor_probs_pearson_corr"] >= 0.999
    assert abs(metrics["rollout_corr/log_ppl_diff"]) < 1e-5
    assert (rollout - recomputed).abs().max() < 1e-4


def test_a_sample_missing_a_declared_field_fails_naming_the_key(talker: Any, tiny_path: Path, tiny_config: Any) -> None:
    torch.manual_seed(1)
    sequence, inputs = spoken_sequence(tiny_path, tiny_config)
    (sample,) = talker.sample_speech(sequence, n=1, max_new_tokens=6, media=inputs)
    del sample.extra_fields[RESIDUAL_CODES]
    with pytest.raises(ExtraFieldError, match=RESIDUAL_CODES.replace(".", r"\.")):
        actor_log_probs(tiny_path, [sample])


def test_sampling_in_training_mode_with_gradient_checkpointing_keeps_the_cache_and_the_mode(
    tiny_path: Path, tiny_config: Any, media: Any
) -> None:
    """The actor trains with gradient checkpointing, under which transformers turns the KV
    cache off in training mode; the talker's generate then failed on a multimodal prompt."""
    from omni_qwen3.talker_policy import Qwen3OmniTalkerPolicy

    policy = Qwen3OmniTalkerPolicy.from_pretrained(tiny_path)
    policy.gradient_checkpointing_enable()
    policy.train()
    torch.manual_seed(2)
    sequence, inputs = spoken_sequence(tiny_path, tiny_config, media)
    samples = policy.sample_speech(sequence, n=2, max_new_tokens=8, media=inputs)
    assert len(samples) == 2 and policy.training and policy.talker.training


def test_an_update_moves_the_talker_and_nothing_it_consumes(talker: Any, tiny_path: Path, tiny_config: Any) -> None:
    """Full fine-tuning (no LoRA to hide behind): after a step with non-zero advantages the
    talker's decoder moved, and the thinker, code predictor, code2wav and the projections
    into the talker are bit-identical."""
    from omni_training.actor import Actor
    from omni_training.batching import MicroBatch, collate
    from omni_training.policy_loss import PolicyLossConfig
    from omni_training.settings import NO_LORA, ActorSettings, OptimizerSettings

    torch.manual_seed(2)
    sequence, inputs = spoken_sequence(tiny_path, tiny_config)
    samples = talker.sample_speech(sequence, n=4, max_new_tokens=8, media=inputs)
    settings = ActorSettings(
        loss_mode="vanilla", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"), gradient_checkpointing=False
    )
    actor = Actor.from_pretrained(
        str(tiny_path), Qwen3OmniTalkerAdapter(), settings=settings, lora=NO_LORA, optim=OptimizerSettings(lr=1e-2)
    )
    before = {name: p.detach().clone() for name, p in actor.model.named_parameters()}
    prompts = [{"input_ids": torch.tensor([s.prompt_ids]), "attention_mask": torch.ones(1, len(s.prompt_ids))} for s in samples]
    model_inputs, responses, mask = collate(prompts, [s.response_ids for s in samples], pad_token_id=0)
    extra = {key: [s.extra_fields[key] for s in samples] for key in TALKER_FIELDS if key in samples[0].extra_fields}
    advantages = torch.tensor([[1.0], [-1.0], [0.5], [-0.5]]) * mask
    metrics = actor.update([MicroBatch(model_inputs, responses, mask, advantages=advantages, extra=extra)], on_policy=True)
    assert metrics["actor/grad_norm"] > 0
    after = dict(actor.model.named_parameters())
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    frozen = ("thinker.", "talker.code_predictor.", "code2wav.", "talker.text_projection.", "talker.hidden_projection.")
    assert not {name for name in changed if name.startswith(frozen)}
    assert any(name.startswith("talker.model.layers.") for name in changed)


def test_drift_probes_are_spoken_anew_from_the_thinker_being_trained(tiny_path: Path, tiny_config: Any) -> None:
    from omni_qwen3.talker_drift import PROBE_PHRASES, Qwen3OmniTalkerDrift
    from omni_qwen3.thinker_policy import Qwen3OmniThinkerPolicy
    from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter

    processor = Qwen3OmniThinkerAdapter().configure_processor(str(tiny_path), tiny_config)
    # Four phrases: the random tiny talker barely reads its conditioning, so a moved thinker
    # changes a seeded draw of 8 codes in some phrases only (two of four here).
    probe = Qwen3OmniTalkerDrift(str(tiny_path), processor, phrases=PROBE_PHRASES, max_new_tokens=8)
    policy = Qwen3OmniThinkerPolicy.from_pretrained(tiny_path)
    torch.manual_seed(0)
    first, again = probe.speak(policy), probe.speak(policy)
    assert [p.text for p in first] == list(PROBE_PHRASES)
    assert all(p.sample_rate == probe.reference.speech_sample_rate for p in first)
    assert all(np.array_equal(a.waveform, b.waveform) for a, b in zip(first, again, strict=True))  # seeded
    # The speech follows the thinker it reads: the same seed through another thinker differs.
    with torch.no_grad():
        for parameter in policy.thinker.audio_tower.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))
    moved = probe.speak(policy)
    assert any(not np.array_equal(a.waveform, b.waveform) for a, b in zip(first, moved, strict=True))
