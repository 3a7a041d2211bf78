"""The local engine's judge endpoint, served by a tiny chat model built offline: it answers what
transformers' own ``generate`` answers for the same conversation, alone or in a batch of
concurrent requests, and refuses what it cannot serve with OpenAI's error shape."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from omni_rollout.chat_server import ChatServer, ChatServerSettings


@pytest.fixture(scope="module")
def judge_path() -> Path:
    from omni_model_kit.tiny import build_tiny_chat_lm

    return build_tiny_chat_lm()


@pytest.fixture(scope="module")
def server(judge_path: Path) -> Iterator[ChatServer]:
    with ChatServer(ChatServerSettings(str(judge_path), response_length=12, prompt_length=128, max_num_seqs=4)) as served:
        yield served


def post(server: ChatServer, body: dict[str, Any], path: str = "/v1/chat/completions") -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"http://{server.address}{path}", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def reference_answer(judge_path: Path, messages: list[dict[str, str]], max_tokens: int) -> str:
    """transformers' greedy generate on the conversation, stopped at the end-of-turn token."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(judge_path)
    model = AutoModelForCausalLM.from_pretrained(judge_path, dtype=torch.float32).eval()
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=max_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    new = out[0, ids["input_ids"].shape[1]:].tolist()
    if tokenizer.eos_token_id in new:
        new = new[:new.index(tokenizer.eos_token_id)]
    return str(tokenizer.decode(new, skip_special_tokens=True))


QUESTIONS = ["Is 3 the answer?", "Rate this caption from 0 to 1.", "The answer is 12 and the reference is 12.",
             "Hello", "Score: ", "What is 2 + 3? Reply with JSON."]


def test_answers_equal_transformers_generate_alone_and_in_concurrent_batches(
    server: ChatServer, judge_path: Path
) -> None:
    conversations = [[{"role": "system", "content": "You are a judge."}, {"role": "user", "content": q}]
                     for q in QUESTIONS]
    expected = [reference_answer(judge_path, c, 10) for c in conversations]
    status, alone = post(server, {"messages": conversations[0], "max_tokens": 10, "temperature": 0})
    assert status == 200 and alone["choices"][0]["message"]["content"] == expected[0]
    assert alone["object"] == "chat.completion" and alone["model"] == str(judge_path)
    assert alone["usage"]["total_tokens"] == alone["usage"]["prompt_tokens"] + alone["usage"]["completion_tokens"]
    with ThreadPoolExecutor(len(conversations)) as pool:  # left-padded together, up to 4 at once
        together = list(pool.map(lambda c: post(server, {"messages": c, "max_tokens": 10, "temperature": 0.0}),
                                 conversations))
    assert [status for status, _ in together] == [200] * len(conversations)
    assert [answer["choices"][0]["message"]["content"] for _, answer in together] == expected
    assert len({answer["id"] for _, answer in together}) == len(conversations)
    # content parts, as verl-omni's judge rewards send them, are the same conversation
    parts = [{"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} for m in conversations[1]]
    assert post(server, {"messages": parts, "max_tokens": 10, "temperature": 0})[1]["choices"][0]["message"][
        "content"] == expected[1]


def test_max_tokens_is_capped_at_the_response_length(server: ChatServer) -> None:
    status, answer = post(server, {"messages": [{"role": "user", "content": "Go on"}], "max_tokens": 500,
                                   "temperature": 0})
    assert status == 200 and answer["usage"]["completion_tokens"] <= 12
    assert answer["choices"][0]["finish_reason"] in ("stop", "length")


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"messages": []}, 400, "messages must be a non-empty list"),
    ({"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"}, 404, "is not served here"),
    ({"messages": [{"role": "user", "content": "x " * 300}]}, 400, "the judge takes at most 128"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "data:image/png;base64," + base64.b64encode(b"\x89PNG").decode()}}]}]}, 400, "takes no images"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, 400, "max_tokens must be a positive"),
    ({"messages": [{"role": "user", "content": [{"type": "audio", "audio": "..."}]}]}, 400, "unsupported content"),
])
def test_requests_it_cannot_serve_are_refused_with_the_reason(
    server: ChatServer, body: dict[str, Any], status: int, message: str
) -> None:
    got, answer = post(server, body)
    assert got == status and message in answer["error"]["message"]


def test_the_model_list_names_the_served_model(server: ChatServer, judge_path: Path) -> None:
    with urllib.request.urlopen(f"http://{server.address}/v1/models", timeout=10) as response:
        assert json.loads(response.read())["data"][0]["id"] == str(judge_path)


def test_a_vision_judge_sees_each_image_as_transformers_does() -> None:
    """A judge with an image processor (a tiny Qwen2-VL, built offline) gets the pictures of
    ``omni_rewards.judge``'s messages (``image_url`` data URIs): each request's answer equals
    transformers' greedy ``generate`` on the processor's inputs for the same conversation and
    pictures (batched with another request), and every picture adds its placeholders to the prompt."""
    import numpy as np
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from omni_model_kit.tiny import build_tiny_vision_lm
    from omni_rewards.judge import chat_completion, judge_messages

    path = build_tiny_vision_lm()
    pictures = [Image.fromarray(np.random.default_rng(seed).integers(0, 256, (56, 56, 3), dtype=np.uint8))
                for seed in range(3)]
    rubric = "Does the picture show a cat? Reply with JSON."
    asked = [judge_messages(rubric, images=pictures[:1]), judge_messages(rubric, images=pictures[1:]),
             judge_messages(rubric)]
    settings = ChatServerSettings(str(path), response_length=6, prompt_length=256, max_num_seqs=4)
    with ChatServer(settings) as served:
        with ThreadPoolExecutor(3) as pool:  # concurrent: answered in one batch
            answers = list(pool.map(lambda m: chat_completion(served.address, m, max_tokens=6), asked))
        prompt_tokens = [post(served, {"messages": m, "max_tokens": 1})[1]["usage"]["prompt_tokens"] for m in asked]
    processor = AutoProcessor.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
    for messages, images, answer in zip(asked, ([pictures[0]], pictures[1:], None), answers, strict=True):
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[text], images=images, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=6, do_sample=False, pad_token_id=processor.tokenizer.pad_token_id)
        new = out[0, inputs["input_ids"].shape[1]:].tolist()
        eos = processor.tokenizer.eos_token_id
        assert answer == processor.tokenizer.decode(new[:new.index(eos)] if eos in new else new, skip_special_tokens=True)
    markers = len(processor.tokenizer("<|vision_start|><|vision_end|>", add_special_tokens=False).input_ids)
    per_picture = markers + (56 // 14) ** 2 // 4  # the picture's markers and its merged patches
    assert prompt_tokens[0] - prompt_tokens[2] == per_picture and prompt_tokens[1] - prompt_tokens[2] == 2 * per_picture
