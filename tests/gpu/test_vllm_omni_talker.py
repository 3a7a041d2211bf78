"""The talker (rollout mode ``talker``) on the real vLLM-Omni: thinker -> talker -> code2wav, started
by our rollout server as verl starts it, and the actor's teacher-forced log-probs of what it sampled.

The tiny model is :data:`omni_qwen3.tiny.SERVED_TALKER_SPEC` (the sizes vLLM-Omni's talker
hand-off takes as fixed), in bf16: vLLM-Omni builds the talker's prefill in bf16 whatever the
engine's dtype, so an fp32 engine stops at the talker's first request. Requests go through
verl's ``generate`` on our server with the policy stage's logit mask applied (on the talker
stage only) and the speech sample the server adds; the actor (fp32) rebuilds the talker's
conditioning from the stored thinker sequence and scores the sampled codes.

The thinker is not the policy here: it answers with the deploy defaults, which these tests set
per case on the engine's default sampling params, as vLLM-Omni's own deploy files do:
- an answer that stops on end-of-turn (``<|im_end|>`` pushed up by a logit bias once the
  answer has 3 tokens): the talker speaks all of it but the end token, and the actor's log-probs
  equal the engine's to bf16 precision;
- an answer cut at ``max_tokens``: vLLM-Omni conditions the talker one text row short of the
  stored source (desk-check A1), so the sample is masked out of training and flagged.

Runs on the CPU with the cpu-rollout extra (slow) and on a CUDA GPU with the gpu extra.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_omni_replica import ON_GPU, Served, serve, skip_without_engine  # noqa: E402

pytestmark = [pytest.mark.gpu] if ON_GPU else [pytest.mark.slow]
SPEECH_TOKENS = 12
SAMPLES = 3
ANSWER_TOKENS = 3


@pytest.fixture(scope="module")
def talker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    skip_without_engine()
    from omni_qwen3.tiny import SERVED_TALKER_SPEC, build_tiny_qwen3_omni
    from omni_verl.settings import VerlSettings

    model_dir = build_tiny_qwen3_omni(tmp_path_factory.mktemp("talker") / "tiny", spec=SERVED_TALKER_SPEC)
    settings = VerlSettings(model_path=str(model_dir), stage="talker", pipeline_mode="talker",
                            audio_rewards_json='[{"name": "duration", "weight": 1.0}]')
    with serve(settings, response_length=SPEECH_TOKENS, dtype="bfloat16") as served:
        yield served


def _prompt(served: Served, question: str) -> list[int]:
    messages = [{"role": "user", "content": [{"type": "text", "text": question}]}]
    text = served.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(served.processor.tokenizer(text).input_ids)


def _speak(served: Served, question: str, **thinker: Any) -> list[Any]:
    """``SAMPLES`` talker samples for one question, the thinker answering with ``thinker`` set
    on its default sampling params; each with the speech sample our server adds."""
    defaults = served.server.engine.omni.default_sampling_params_list
    saved = defaults[0]
    answer = saved.clone()
    for name, value in thinker.items():
        setattr(answer, name, value)
    defaults[0] = answer
    try:
        prompt = _prompt(served, question)
        return [
            served.loop.run(served.server.generate(
                prompt_ids=prompt, sampling_params={"temperature": 1.0, "logprobs": True}, request_id=f"{question}-{k}",
            ))
            for k in range(SAMPLES)
        ]
    finally:
        defaults[0] = saved


def _samples(results: list[Any]) -> list[tuple[Any, dict[str, Any]]]:
    """Each result as the actor's sample, with the speech sample our server added."""
    from omni_contracts import RolloutSample
    from omni_rollout.speech_sample import SPEECH_SAMPLE

    pairs = []
    for result in results:
        speech = result.extra_fields[SPEECH_SAMPLE]
        pairs.append((RolloutSample(speech["prompt_ids"], result.token_ids, speech["response_mask"],
                                    result.log_probs, speech["fields"]), speech))
    return pairs


def _actor_log_probs(served: Served, samples: list[Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fp32 actor's log-probs of each sample as the trainer batches them, the engine's
    padded alike, and the mask of sampled tokens."""
    from omni_qwen3.talker_adapter import Qwen3OmniTalkerAdapter
    from omni_qwen3.talker_fields import TALKER_FIELDS
    from omni_training.actor import Actor
    from omni_training.batching import MicroBatch, collate
    from omni_training.policy_loss import PolicyLossConfig
    from omni_training.settings import NO_LORA, ActorSettings, OptimizerSettings

    settings = ActorSettings(
        loss_mode="vanilla", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"), gradient_checkpointing=False
    )
    actor = Actor.from_pretrained(
        served.server.model_config.local_path, Qwen3OmniTalkerAdapter(),
        settings=settings, lora=NO_LORA, optim=OptimizerSettings(lr=1e-6),
    )
    prompts = [{"input_ids": torch.tensor([s.prompt_ids]), "attention_mask": torch.ones(1, len(s.prompt_ids))}
               for s in samples]
    inputs, responses, mask = collate(prompts, [s.response_ids for s in samples], pad_token_id=0)
    extra = {key: [s.extra_fields.get(key) for s in samples] for key in TALKER_FIELDS
             if any(key in s.extra_fields for s in samples)}
    (log_probs,) = actor.compute_log_probs([MicroBatch(inputs, responses, mask, extra=extra)])
    width = log_probs.shape[1]
    engine = torch.tensor([list(s.response_logprobs) + [0.0] * (width - len(s.response_ids)) for s in samples])
    sampled = torch.tensor([[1.0] * len(s.response_ids) + [0.0] * (width - len(s.response_ids)) for s in samples])
    return log_probs * sampled, engine, sampled


def test_a_finished_answer_is_spoken_and_the_actor_scores_the_talkers_codes(talker: Served) -> None:
    from omni_qwen3.talker_fields import RESIDUAL_CODES, SOURCE_IDS
    from omni_training.consistency import rollout_actor_consistency
    from omni_contracts.speech import SOURCE_TRUNCATED

    im_end = talker.hf_config.im_end_token_id
    pairs = _samples(_speak(talker, "How many fruits?", min_tokens=ANSWER_TOKENS, logit_bias={im_end: 100.0}))
    samples = [sample for sample, _ in pairs]
    codebook = talker.hf_config.code2wav_config.codebook_size
    eos = talker.hf_config.talker_config.codec_eos_token_id
    for sample, speech in pairs:
        fields = sample.extra_fields
        assert not speech[SOURCE_TRUNCATED] and len(speech["spoken_ids"]) == ANSWER_TOKENS
        assert fields[SOURCE_IDS].tolist()[-ANSWER_TOKENS:] == list(speech["spoken_ids"])
        assert 1 <= len(sample.response_ids) <= SPEECH_TOKENS and all(sample.response_mask)
        # The talker's ban list on the talker's vocabulary: codes of the codebook, or end of speech.
        assert all(t < codebook or t == eos for t in sample.response_ids), sample.response_ids
        assert fields[RESIDUAL_CODES].shape[1] == talker.hf_config.talker_config.num_code_groups - 1
    actor, engine, mask = _actor_log_probs(talker, samples)
    metrics = rollout_actor_consistency(engine, actor, mask)
    pearson, gap = metrics["training/rollout_actor_probs_pearson_corr"], metrics["rollout_corr/log_ppl_diff"]
    print(f"talker bf16 engine vs fp32 actor: pearson={pearson:.6f} log_ppl_diff={gap:.2e} "
          f"max|d|={float(((engine - actor) * mask).abs().max()):.3e} over {int(mask.sum())} tokens")
    # bf16 on the engine (vLLM-Omni's talker runs in nothing else), fp32 on the actor.
    assert pearson >= 0.999 and abs(gap) <= 5e-3  # measured on the CPU: 0.999985, 1.5e-4


def test_an_answer_cut_at_its_length_limit_is_never_trained(talker: Served) -> None:
    from omni_contracts.speech import SOURCE_TRUNCATED

    results = _speak(talker, "Count to a hundred.", max_tokens=ANSWER_TOKENS, min_tokens=ANSWER_TOKENS)
    for sample, speech in _samples(results):
        assert speech[SOURCE_TRUNCATED]
        assert len(sample.response_ids) >= 1 and not any(sample.response_mask)
