"""Rollout mode ``talker`` through verl's vLLM-Omni server on CPU, with the local engine as the oracle.

The tiny Qwen3-Omni's talker samples speech for a thinker answer in the local engine. The same
samples are then returned the way vLLM-Omni 0.28 returns a request of the talker-RL pipeline
(a recording stand-in for ``AsyncOmni``: the thinker's text, the talker's codec-0 tokens and
log-probs, its prefill placeholder and ``codes.audio``, code2wav's waveform), go through our
rollout server (``omni_verl.rollout.VllmOmniHttpServer``: verl's own
``generate`` on the vLLM-Omni driver, real vLLM ``SamplingParams``) and the speech sample it
adds (the ``omni_single_turn`` agent loop and the rollout adapter's
``postprocess_agent_loop_output``), and reach the actor, which rebuilds the talker's
conditioning from the stored thinker sequence. The actor's log-probs must match the sampled
ones as they do for the local engine's samples.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

pytest.importorskip("vllm", reason="needs the gpu extra (vllm): uv sync --extra gpu")
pytest.importorskip("verl", reason="needs the distributed extra (verl): uv sync --extra distributed")

STUB = str(Path(__file__).resolve().parents[1] / "apps" / "trainer" / "tests" / "engines" / "verl")
if STUB not in sys.path:
    sys.path.insert(0, STUB)  # verl_server_stub: our server as verl's __init__ and run_server leave it

from omni_qwen3.talker_adapter import Qwen3OmniTalkerAdapter  # noqa: E402
from omni_qwen3.talker_fields import RESIDUAL_CODES, SOURCE_IDS, TALKER_FIELDS  # noqa: E402
from omni_rollout.vllm_omni.testing import RecordingAsyncOmni  # noqa: E402
from verl_server_stub import stage_output, stub_server  # noqa: E402

pytestmark = pytest.mark.slow

SPOKEN = "Three apples and two pears."
N = 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    return build_tiny_qwen3_omni(tmp_path_factory.mktemp("tiny") / "ckpt", seed=0)


@pytest.fixture(scope="module")
def policy(tiny: Path) -> Any:
    from omni_qwen3.talker_policy import Qwen3OmniTalkerPolicy

    return Qwen3OmniTalkerPolicy.from_pretrained(tiny).eval()


@pytest.fixture(scope="module")
def turn(tiny: Path, policy: Any) -> tuple[list[int], list[int]]:
    """The chat prompt and the thinker's answer to it, ending with ``<|im_end|>`` as sampled."""
    processor = Qwen3OmniTalkerAdapter().configure_processor(str(tiny), policy.config)
    messages = [{"role": "user", "content": [{"type": "text", "text": "How many fruits?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt = processor.tokenizer(text)["input_ids"]
    answer = processor.tokenizer.encode(SPOKEN) + [policy.config.im_end_token_id]
    return list(prompt), answer


@pytest.fixture(scope="module")
def local_samples(policy: Any, turn: tuple[list[int], list[int]]) -> list[Any]:
    prompt, answer = turn
    torch.manual_seed(3)
    return policy.sample_speech(torch.tensor([prompt + answer[:-1]]), n=N, max_new_tokens=24)


def as_vllm_omni(prompt: Sequence[int], answer: Sequence[int], sample: Any, rate: int) -> list[Any]:
    """What ``AsyncOmni.generate`` yields for one request of the talker-RL pipeline (vLLM-Omni
    0.28, its own output classes), built from a local sample: the thinker's answer, the talker's
    tokens with codes rows for the prefill (zeros) and each consumed token, and code2wav's waveform."""
    tokens = list(sample.response_ids)
    consumed = len(tokens) - 1  # the last token (the end of speech) is never fed back
    residual = sample.extra_fields[RESIDUAL_CODES][:consumed]
    decode = torch.cat([torch.tensor(tokens[:consumed])[:, None], residual], dim=1)
    codes = torch.cat([torch.zeros(len(sample.prompt_ids), decode.shape[1], dtype=torch.long), decode])
    return [
        stage_output(0, prompt, answer),
        stage_output(1, [0] * len(sample.prompt_ids), tokens, logprobs=list(sample.response_logprobs),
                     multimodal_output={"codes": {"audio": codes}}),
        stage_output(2, [], [], multimodal_output={"audio": [sample.waveform[None]], "sr": [torch.tensor(rate)]}),
    ]


def actor_log_probs(tiny: Path, samples: Sequence[Any]) -> torch.Tensor:
    """The local actor on samples as the trainer batches them (absent optional fields: None)."""
    from omni_training.actor import Actor
    from omni_training.batching import MicroBatch, collate
    from omni_training.policy_loss import PolicyLossConfig
    from omni_training.settings import NO_LORA, ActorSettings, OptimizerSettings

    settings = ActorSettings(
        loss_mode="vanilla", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"), gradient_checkpointing=False
    )
    actor = Actor.from_pretrained(
        str(tiny), Qwen3OmniTalkerAdapter(), settings=settings, lora=NO_LORA, optim=OptimizerSettings(lr=1e-6)
    )
    prompts = [{"input_ids": torch.tensor([s.prompt_ids]), "attention_mask": torch.ones(1, len(s.prompt_ids))} for s in samples]
    inputs, responses, mask = collate(prompts, [s.response_ids for s in samples], pad_token_id=0)
    extra = {key: [s.extra_fields.get(key) for s in samples] for key in TALKER_FIELDS
             if any(key in s.extra_fields for s in samples)}
    (log_probs,) = actor.compute_log_probs([MicroBatch(inputs, responses, mask, extra=extra)])
    return log_probs * mask


def padded(samples: Sequence[Any], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    rollout = torch.tensor([list(s.response_logprobs) + [0.0] * (width - len(s.response_ids)) for s in samples])
    mask = torch.tensor([[1.0] * len(s.response_ids) + [0.0] * (width - len(s.response_ids)) for s in samples])
    return rollout, mask


def test_vllm_omni_talker_samples_reach_the_actor_with_their_log_probs(
    tiny: Path, policy: Any, turn: tuple[list[int], list[int]], local_samples: list[Any]
) -> None:
    from vllm import SamplingParams

    from omni_contracts import RolloutSample
    from omni_training.consistency import rollout_actor_consistency
    from omni_rollout.speech_sample import SPEECH_SAMPLE

    prompt, answer = turn
    rate = policy.speech_sample_rate
    by_request = {f"talker-{k}": as_vllm_omni(prompt, answer, s, rate) for k, s in enumerate(local_samples)}
    thinker_defaults = SamplingParams(temperature=0.0, max_tokens=2048)  # vLLM-Omni's production thinker
    omni = RecordingAsyncOmni([thinker_defaults, SamplingParams(), SamplingParams(temperature=0.0)],
                              respond=lambda p, params, rid: by_request[rid])
    server = stub_server(omni, mode="talker", field_specs=TALKER_FIELDS, max_model_len=512, prompt_length=256,
                         response_length=24)

    async def generate_all() -> list[Any]:  # one request per sample, as verl's agent loop sends them
        return list(await asyncio.gather(*(
            server.generate(prompt_ids=list(prompt), sampling_params={"temperature": 1.0, "logprobs": True},
                            request_id=rid)
            for rid in by_request
        )))

    results = asyncio.run(generate_all())

    # The talker samples with verl's parameters; the thinker and code2wav keep their deploy defaults.
    params = [call["sampling_params_list"] for name, call in omni.calls if name == "generate"]
    assert len(params) == N
    assert all(p[1].temperature == 1.0 and p[1].logprobs == 0 and p[1].max_tokens == 24 for p in params)
    assert all(p[0].temperature == 0.0 and p[0].max_tokens == 2048 and p[2].temperature == 0.0 for p in params)

    samples = []
    for result, local in zip(results, local_samples, strict=True):
        speech = result.extra_fields[SPEECH_SAMPLE]
        assert result.token_ids == list(local.response_ids)
        assert result.log_probs == pytest.approx(local.response_logprobs)
        assert len(speech["prompt_ids"]) == len(local.prompt_ids)
        assert speech["fields"][SOURCE_IDS].tolist() == prompt + answer[:-1]
        assert torch.equal(speech["waveform"], local.waveform) and speech["sample_rate"] == rate
        consumed = len(local.response_ids) - 1
        assert torch.equal(speech["fields"][RESIDUAL_CODES][:consumed], local.extra_fields[RESIDUAL_CODES][:consumed])
        samples.append(RolloutSample(speech["prompt_ids"], result.token_ids, speech["response_mask"],
                                     result.log_probs, speech["fields"]))

    # One batch, both engines' samples: the actor rebuilds the conditioning of the vLLM-Omni ones.
    recomputed = actor_log_probs(tiny, [*local_samples, *samples])
    local_part, vllm_part = recomputed[:N], recomputed[N:]
    assert (local_part - vllm_part).abs().max() < 1e-5
    rollout, mask = padded(samples, recomputed.shape[1])
    metrics = rollout_actor_consistency(rollout, vllm_part, mask)
    assert metrics["training/rollout_actor_probs_pearson_corr"] >= 0.999
    assert abs(metrics["rollout_corr/log_ppl_diff"]) < 1e-5


def test_a_sample_whose_source_holds_media_is_refused(policy: Any, turn: tuple[list[int], list[int]]) -> None:
    prompt, answer = turn
    source = torch.tensor(prompt[:3] + [policy.config.thinker_config.image_token_id] + prompt[3:] + answer[:-1])
    with pytest.raises(ValueError, match=r"holds media placeholders.*vllm-omni#3184"):
        policy(
            input_ids=torch.zeros(1, 12, dtype=torch.long), attention_mask=torch.ones(1, 12, dtype=torch.long),
            residual_codes=[torch.zeros(2, 3, dtype=torch.long)], talker_source_ids=[source],
        )


def test_a_source_that_does_not_give_the_rows_prefill_is_refused(
    tiny: Path, local_samples: list[Any], turn: tuple[list[int], list[int]]
) -> None:
    """A prefill placeholder of the wrong length (a vLLM-Omni that counted the talker's
    prefill differently) is caught, not trained on shifted rows."""
    from omni_contracts import RolloutSample

    prompt, answer = turn
    local = local_samples[0]
    wrong = RolloutSample(
        prompt_ids=(0,) * (len(local.prompt_ids) + 1), response_ids=local.response_ids,
        response_mask=(1,) * len(local.response_ids), response_logprobs=local.response_logprobs,
        extra_fields={SOURCE_IDS: torch.tensor(prompt + answer[:-1]), RESIDUAL_CODES: local.extra_fields[RESIDUAL_CODES]},
    )
    with pytest.raises(ValueError, match="do not belong to it"):
        actor_log_probs(tiny, [wrong])


def test_weights_sync_to_the_talker_stage_only() -> None:
    """Mode ``talker``: verl's weight sync (its worker extension's ``update_weights_from_ipc``,
    through our server's driver) reaches stage 1 only, the thinker keeps its own; a LoRA served
    as an adapter is refused before any request (vLLM-Omni 0.28 applies it to stage 0 only; the
    translated config merges it)."""
    from verl.workers.rollout.vllm_rollout.utils import VLLM_LORA_INT_ID

    from omni_rollout.vllm_omni import UnsupportedByVllmOmniError

    omni = RecordingAsyncOmni([None, None, None])
    server = stub_server(omni, mode="talker", field_specs=TALKER_FIELDS)
    asyncio.run(server.collective_rpc("update_weights_from_ipc", kwargs={"use_shm": False}))
    assert [(name, call["method"], call["stage_ids"]) for name, call in omni.calls] == [
        ("collective_rpc", "update_weights_from_ipc", [1])]

    server.model_config = SimpleNamespace(lora_rank=8, lora={}, processor=None)  # verl: lora_as_adapter
    omni.rpc_results["list_loras"] = [[VLLM_LORA_INT_ID]]
    with pytest.raises(UnsupportedByVllmOmniError, match="LoRA to stage 0 only"):
        asyncio.run(server.generate(prompt_ids=[1, 2], sampling_params={"logprobs": True}, request_id="lora"))
    assert "generate" not in omni.names()


def test_a_groups_shared_source_runs_the_thinker_once(
    policy: Any, turn: tuple[list[int], list[int]], local_samples: list[Any]
) -> None:
    """The n samples of a group speak one thinker answer: its conditioning is rebuilt once and
    reused (the thinker is frozen in talker training), with the same logits."""
    prompt, answer = turn
    source = torch.tensor(prompt + answer[:-1])
    width = max(len(s.prompt_ids) + len(s.response_ids) for s in local_samples)
    ids = torch.zeros(len(local_samples), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, s in enumerate(local_samples):
        length = len(s.prompt_ids) + len(s.response_ids)
        ids[row, len(s.prompt_ids) : length] = torch.tensor(s.response_ids)
        mask[row, :length] = 1  # right-padded, as verl lays rows out
    calls = []
    hook = policy.thinker.register_forward_hook(lambda *_: calls.append(1))
    policy._rebuilt.clear()
    try:
        inputs = {"input_ids": ids, "attention_mask": mask, "residual_codes": [s.extra_fields[RESIDUAL_CODES] for s in local_samples],
                  "talker_source_ids": [source] * len(local_samples)}
        first = policy(**inputs).logits
        second = policy(**inputs).logits
        assert len(calls) == 1
        policy._rebuilt.clear()
        assert torch.equal(policy(**inputs).logits, first) and torch.equal(second, first) and len(calls) == 2
    finally:
        hook.remove()
