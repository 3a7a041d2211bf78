"""The CPU rollout's pieces (``omni_verl_cpu.rollout``, ``omni_verl_cpu.speech``) against verl's own code.

The whole backend runs in ``test_verl_cpu_run.py``; these pin the parts a run would only
show as wrong numbers: the sampling options, the expert weights verl streams, the media cache.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed --extra gpu)")

pytestmark = pytest.mark.slow


def test_sampling_options_that_change_the_distribution_are_refused_by_name() -> None:
    from omni_verl_cpu.rollout import sampling_settings

    settings = sampling_settings({"temperature": 0.7, "top_p": 0.9, "top_k": 0, "repetition_penalty": 1.0}, 5)
    assert (settings.temperature, settings.top_p, settings.top_k, settings.max_new_tokens, settings.n) == (0.7, 0.9, -1, 5, 1)
    with pytest.raises(ValueError, match="repetition_penalty=1.0 only"):
        sampling_settings({"repetition_penalty": 1.1}, 5)
    with pytest.raises(ValueError, match="ignore_eos"):
        sampling_settings({"ignore_eos": True}, 5)


def test_a_speech_stage_samples_its_full_distribution_at_a_temperature() -> None:
    """``SpeechPolicy.sample_speech`` takes a temperature only: what the actor recomputes."""
    from omni_verl_cpu.rollout import sampling_settings
    from omni_verl_cpu.speech import SpeechSettings, speech_settings

    assert speech_settings(sampling_settings({"temperature": 0.8}, 12)) == SpeechSettings(0.8, 12)
    for params in ({"top_p": 0.9}, {"top_k": 5}, {"stop_token_ids": [3]}):
        with pytest.raises(ValueError, match="at a temperature only"):
            speech_settings(sampling_settings(params, 12))
    with pytest.raises(ValueError, match="positive temperature"):
        speech_settings(sampling_settings({"temperature": 0.0}, 12))


def test_experts_verl_streams_unfused_are_packed_back_exactly() -> None:
    import torch
    from verl.workers.engine.fsdp.utils import unfuse_moe_params

    from omni_verl_cpu.rollout import pack_experts

    gen = torch.Generator().manual_seed(0)
    packed = {
        "thinker.model.layers.0.mlp.experts.gate_up_proj": torch.randn(4, 6, 5, generator=gen),  # [E, 2I, H]
        "thinker.model.layers.0.mlp.experts.down_proj": torch.randn(4, 5, 3, generator=gen),  # [E, H, I]
        "thinker.model.layers.0.self_attn.q_proj.weight": torch.randn(5, 5, generator=gen),
    }
    streamed = dict(unfuse_moe_params(packed.items(), "qwen3_omni_moe"))
    assert len(streamed) == 1 + 4 * 3  # verl sends vLLM's per-expert keys
    repacked = pack_experts(streamed)
    assert repacked.keys() == packed.keys()
    assert all(torch.equal(repacked[name], packed[name]) for name in packed)
    streamed.pop("thinker.model.layers.0.mlp.experts.2.up_proj.weight")
    with pytest.raises(ValueError, match="incomplete expert weights"):
        pack_experts(streamed)


def test_the_media_cache_keys_on_values_not_objects() -> None:
    from PIL import Image

    from omni_verl_cpu.rollout import media_key

    tone = np.sin(np.arange(800, dtype=np.float32))
    picture = Image.new("RGB", (8, 8), (10, 20, 30))
    key = media_key([1, 2, 3], [picture], None, [tone.copy()], None)
    assert key == media_key([1, 2, 3], [picture.copy()], None, [tone.copy()], None)
    assert key != media_key([1, 2, 3], [Image.new("RGB", (8, 8), (10, 20, 31))], None, [tone], None)
    assert key != media_key([1, 2, 4], [picture], None, [tone], None)
    assert key != media_key([1, 2, 3], [picture], None, [tone * 2], None)


def test_the_weights_digest_sees_one_bit_and_ignores_order() -> None:
    import torch

    from omni_verl_cpu.rollout import weights_digest

    weights = {"b": torch.arange(6, dtype=torch.float32).reshape(2, 3), "a": torch.tensor(1.5), "c": torch.ones(2, dtype=torch.bfloat16)}
    digest = weights_digest(weights)
    assert digest == weights_digest(dict(reversed(list(weights.items()))))
    flipped = weights["b"].clone()
    flipped.view(torch.int32)[0, 0] ^= 1  # the lowest mantissa bit of one element
    assert weights_digest({**weights, "b": flipped}) != digest
    assert weights_digest({**weights, "b": weights["b"].reshape(3, 2)}) != digest  # same bytes, other shape
    assert weights_digest({**weights, "a": torch.tensor(1.5, dtype=torch.float64)}) != digest


@pytest.mark.parametrize("num", [0, 3])
def test_teacher_scores_come_in_the_layout_verl_reads_from_vllm(num: int) -> None:
    """The teacher's answer equals what verl's ``extract_prompt_logprobs`` makes of a vLLM
    ``RequestOutput`` holding the same model's prompt log-probs (row i: token i + 1)."""
    from types import SimpleNamespace

    import torch
    from transformers import AutoConfig
    from verl.workers.rollout.vllm_rollout.utils import extract_prompt_logprobs
    from vllm.logprobs import Logprob

    from omni_contracts import resolve_training_adapter
    from omni_qwen3.tiny import build_tiny_qwen3_omni
    from omni_training.distillation import Teacher
    from omni_verl_cpu.rollout import prompt_log_probs

    tiny = str(build_tiny_qwen3_omni())
    teacher = Teacher.from_pretrained(tiny, resolve_training_adapter(AutoConfig.from_pretrained(tiny), "thinker"))
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(tiny)("What is two plus two? The answer is 4.", return_tensors="pt")["input_ids"]
    assert ids.shape[1] >= 8
    ours = prompt_log_probs(teacher, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, num)

    with torch.no_grad():
        reference = teacher.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0].float().log_softmax(-1)
    rows: list[dict[int, Logprob] | None] = [None]  # vLLM gives the first prompt token no log-prob
    for position, token in enumerate(ids[0, 1:].tolist()):
        dist = reference[position]
        ranks = (dist > dist[token]).sum().item() + 1
        row = {token: Logprob(float(dist[token]), rank=int(ranks))}
        if num:
            top = dist.topk(num)
            row = {**{int(t): Logprob(float(v), rank=r + 1) for r, (v, t) in enumerate(zip(top.values, top.indices))},
                   **({} if ranks <= num else row)}
        rows.append(row)
    theirs: dict[str, list[list[float]]] = {}
    extract_prompt_logprobs(SimpleNamespace(prompt_logprobs=rows), num, theirs)

    assert ours[0] == theirs["prompt_ids"]
    assert len(ours[1]) == ids.shape[1]
    np.testing.assert_allclose(np.array(ours[1]), np.array(theirs["prompt_logprobs"]), atol=1e-5)
    with pytest.raises(ValueError, match="2 tokens or more"):
        prompt_log_probs(teacher, {"input_ids": ids[:, :1], "attention_mask": torch.ones_like(ids[:, :1])}, num)


def test_the_speakers_thinker_never_answers_what_the_local_engines_answers_never_sample() -> None:
    """``data.spoken_text=thinker`` on both engines: the thinker's greedy answer is taken under
    the thinker stage's mask, media placeholders and the head's tail past the tokenizer (the
    tail was missing on verl's CPU rollout)."""
    from transformers import AutoConfig, AutoProcessor

    from omni_contracts import get_rollout_adapter, resolve_training_adapter
    from omni_qwen3.tiny import build_tiny_qwen3_omni
    from omni_rollout.placeholders import policy_logit_mask
    from omni_verl_cpu.speech import THINKER_MODE, LocalSpeaker
    from omni_training.logit_mask import masked_ids
    from omni_training.model_loading import load_policy
    from omni_training.settings import NO_LORA

    tiny = str(build_tiny_qwen3_omni())
    hf_config = AutoConfig.from_pretrained(tiny)
    processor = AutoProcessor.from_pretrained(tiny)
    tokenizer = processor.tokenizer
    model, _ = load_policy(tiny, resolve_training_adapter(hf_config, "talker"), NO_LORA, dtype="float32")
    model.thinker.resize_token_embeddings(len(tokenizer) + 8)  # a head with a tail, as Qwen3-Omni's has
    pipeline = get_rollout_adapter("qwen3_omni_moe")
    speaker = LocalSpeaker.for_model(model, pipeline, hf_config, processor, tokenizer, answer_tokens=4)

    width = int(model.thinker.get_output_embeddings().weight.shape[0])
    assert width == len(tokenizer) + 8
    local = set(masked_ids(policy_logit_mask(pipeline, THINKER_MODE, hf_config, processor, tokenizer), width))
    turn = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert set(speaker.thinker.suppress_token_ids) == local | {turn}
    assert set(range(len(tokenizer), width)) <= local


def test_a_weight_sync_waits_for_the_running_batch_and_each_sample_names_its_weights() -> None:
    """verl's asynchronous trainers sync weights while the replica samples: the load waits for
    the batch that is sampling, so no sample mixes two versions' weights, and each sample
    reports the step of the weights that drew it (verl's staleness reads it), not the step
    loaded by the time it returns."""
    import asyncio
    import threading
    from types import SimpleNamespace

    import torch

    from omni_verl_cpu.rollout import LocalRolloutServer, media_key

    sampling, release = threading.Event(), threading.Event()
    weights_seen: list[float] = []

    class BlockingEngine:
        def generate(self, inputs: list[object], settings: object) -> list[object]:
            sampling.set()
            release.wait(10)
            weights_seen.append(float(server.model.weight.sum()))  # the weights it sampled with, after the wait
            sample = SimpleNamespace(token_ids=[7], logprobs=[-0.5], data={"finish_reason": "stop"})
            return [SimpleNamespace(outputs=[sample]) for _ in inputs]

    config = SimpleNamespace(max_model_len=None, prompt_length=8, response_length=4, seed=0, max_num_seqs=None)
    server = LocalRolloutServer(config, model_config=None, replica_rank=0)
    server.model, server.engine, server.global_steps = torch.nn.Linear(2, 2, bias=False), BlockingEngine(), 3
    torch.nn.init.zeros_(server.model.weight)
    server._media[media_key([1, 2], None, None, None, None)] = {"input_ids": torch.tensor([[1, 2]])}  # no media

    async def scenario() -> tuple[object, int, list[str]]:
        server._arrived = asyncio.Event()
        server._batches = asyncio.create_task(server._batch_loop())
        order: list[str] = []
        request = asyncio.create_task(server.generate([1, 2], {"temperature": 1.0, "max_tokens": 1}, "r0"))
        await asyncio.to_thread(sampling.wait, 10)

        async def load() -> int:
            loaded = await server.load_weights({"weight": torch.ones(2, 2)}, 4)
            order.append("loaded")
            return loaded

        loading = asyncio.create_task(load())
        await asyncio.sleep(0.2)
        order.append("released")
        release.set()
        output, loaded = await request, await loading
        server._batches.cancel()
        return output, loaded, order

    output, loaded, order = asyncio.run(scenario())
    assert order == ["released", "loaded"] and loaded == 1
    assert weights_seen == [0.0]  # the batch sampled with the old weights throughout
    assert output.extra_fields["global_steps"] == 3 and server.global_steps == 4


def test_a_judge_replica_serves_its_checkpoint_as_an_openai_chat_endpoint_at_its_address(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """verl's ``RewardModelManager`` builds replicas with ``is_reward_model`` and hands their
    ``(ip, port)`` to its router: the CPU replica serves the judge at that address, answering as
    its ``reward.reward_model.rollout`` says (greedy for ``do_sample=false``, at most
    ``response_length`` tokens), and refuses verl's token-level calls by name."""
    import asyncio
    import json
    import urllib.request
    from types import SimpleNamespace

    from omni_model_kit.tiny import build_tiny_chat_lm
    from omni_rewards.judge import chat_completion
    from omni_verl_cpu.rollout import LocalRolloutServer, judge_settings

    monkeypatch.setenv("OMNI_RL_CACHE", str(tmp_path_factory.getbasetemp() / "omni-rl-cache"))
    config = SimpleNamespace(dtype="float32", prompt_length=256, response_length=6, max_num_seqs=4, temperature=1.0,
                             top_p=1.0, top_k=-1, do_sample=False)
    assert judge_settings(config, "/j", "10.0.0.1").temperature == 0.0  # do_sample=false: greedy
    judge = str(build_tiny_chat_lm())
    server = LocalRolloutServer(config, model_config=SimpleNamespace(path=judge), replica_rank=0, is_reward_model=True)
    asyncio.run(server.launch_server())
    try:
        host, port = server.get_server_address()
        assert f"{host}:{port}" == server.judge.address and port > 0
        messages = [{"role": "user", "content": "Is 3 a digit?"}]
        request = urllib.request.Request(
            f"http://{host}:{port}/v1/chat/completions", json.dumps({"messages": messages, "max_tokens": 64}).encode(),
            {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
        assert 1 <= answer["usage"]["completion_tokens"] <= 6  # capped at response_length
        first = answer["choices"][0]["message"]["content"]
        assert first and first == chat_completion(f"{host}:{port}", messages, max_tokens=64)  # greedy
        with pytest.raises(ValueError, match="judge replica 0 answers chat requests"):
            asyncio.run(server.generate([1, 2], {"temperature": 1.0}, "r0"))
    finally:
        server.judge.close()
