"""omni_rewards.judge against a judge on localhost that answers as told: a score, prose, an
HTTP error, nothing in time, or a closed port. Each failure is raised with its reason (never
scored 0), and the reward manager counts a judge that times out as a timeout."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from omni_rewards import RewardManager, RewardManagerConfig, ScorerRegistry
from omni_rewards.judge import (
    JudgeAnswerError,
    JudgeError,
    JudgeTimeoutError,
    ajudge_score,
    chat_completion,
    chat_url,
    image_part,
    judge_messages,
    judge_score,
    parse_score,
)


class Judge:
    """A chat endpoint whose next answers are queued (``answers``); it records each request."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, Any, float]] = []  # (status, body or message content, delay)
        self.requests: list[dict[str, Any]] = []
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                judge.requests.append({"path": self.path, **json.loads(self.rfile.read(int(self.headers["Content-Length"])))})
                status, content, delay = judge.answers.pop(0) if judge.answers else (200, '{"score": 1}', 0.0)
                time.sleep(delay)
                body = content if isinstance(content, bytes) else json.dumps(
                    {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def judge() -> Iterator[Judge]:
    served = Judge()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()


def test_the_judge_is_asked_as_verl_omni_asks_it_and_its_score_read(judge: Judge) -> None:
    judge.answers = [(200, 'Sure. {"score": 0.75, "reason": "close"} Done.', 0.0)]
    frame = np.zeros((4, 4, 3), np.uint8)
    verdict = judge_score(judge.address, "Is the caption right?", images=[frame], system="You judge.",
                          model="judge-model", max_tokens=32)
    assert (verdict.score, verdict.reason) == (0.75, "close")
    (request,) = judge.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["model"] == "judge-model" and request["max_tokens"] == 32 and request["temperature"] == 0.0
    system, user = request["messages"]
    assert system == {"role": "system", "content": "You judge."}
    image, text = user["content"]
    assert image["type"] == "image_url" and image["image_url"]["url"].startswith("data:image/png;base64,")
    assert base64.b64decode(image["image_url"]["url"].split(",", 1)[1]).startswith(b"\x89PNG")
    assert text == {"type": "text", "text": "Is the caption right?"}


def test_an_async_reward_function_awaits_the_judge(judge: Judge) -> None:
    judge.answers = [(200, '```json\n{"score": 3}\n```', 0.0)]
    assert asyncio.run(ajudge_score(judge.address, "rate 0-5", high=5.0)).score == 3.0


@pytest.mark.parametrize(("answer", "why"), [
    ("I think it is good.", "holds no JSON object"),
    ('{"rating": 1}', "has no 'score'"),
    ('{"score": "high"}', "is not a number"),
    ('{"score": true}', "is not a number"),
    ('{"score": NaN}', "is not finite"),
    ('{"score": [1]}', "is not a number"),
])
def test_an_answer_without_a_readable_score_is_an_error_not_a_zero(answer: str, why: str) -> None:
    with pytest.raises(JudgeAnswerError, match=why):
        parse_score(answer)


def test_scores_are_clamped_and_read_from_the_first_object() -> None:
    assert parse_score('{"score": 7}')[0] == 1.0 and parse_score('{"score": -2}')[0] == 0.0
    assert parse_score('{"score": "0.5"}') == (0.5, "")
    assert parse_score('{"a": {"b": 1}} then {"score": 0.2}')[0] == 0.2  # the first object that has the key
    assert parse_score('text {"score": 0.4, "reason": "ok"} {"score": 0.9}') == (0.4, "ok")


def test_http_errors_timeouts_and_a_closed_port_are_failures(judge: Judge) -> None:
    judge.answers = [(400, b'{"error": "prompt too long"}', 0.0), *[(500, b'{"error": "out of memory"}', 0.0)] * 3,
                     (200, b"not json", 0.0), (200, "late", 2.0)]
    with pytest.raises(JudgeError, match="answered HTTP 400: .*prompt too long"):  # not retried
        chat_completion(judge.address, judge_messages("x"))
    with pytest.raises(JudgeError, match=r"answered HTTP 500: .*out of memory.* \(after 3 attempts\)"):
        chat_completion(judge.address, judge_messages("x"), backoff_s=0.01)
    assert len(judge.requests) == 4
    with pytest.raises(JudgeError, match="without choices"):
        chat_completion(judge.address, judge_messages("x"))
    with pytest.raises(JudgeTimeoutError, match="did not answer within 0.5 s"):  # not retried: the budget is spent
        chat_completion(judge.address, judge_messages("x"), timeout_s=0.5)
    assert len(judge.requests) == 6
    closed = Judge()
    closed.server.server_close()
    with pytest.raises(JudgeError, match=r"cannot be reached: .* \(after 2 attempts\)"):
        chat_completion(closed.address, judge_messages("x"), timeout_s=5, retries=1, backoff_s=0.01)
    with pytest.raises(JudgeError, match="no judge address"):
        chat_completion("", judge_messages("x"))


def test_a_judge_restarting_behind_the_router_is_asked_again(judge: Judge) -> None:
    """verl's router answers 502 while a judge replica restarts; the next attempt is answered."""
    judge.answers = [(502, b"Bad Gateway", 0.0), (503, b"", 0.0), (200, '{"score": 0.5}', 0.0)]
    assert chat_completion(judge.address, judge_messages("x"), backoff_s=0.01) == '{"score": 0.5}'
    assert len(judge.requests) == 3


def test_addresses_in_every_spelling_reach_the_chat_endpoint() -> None:
    assert chat_url("10.0.0.1:8000") == "http://10.0.0.1:8000/v1/chat/completions"  # verl's router address
    assert chat_url("http://h:1/v1") == "http://h:1/v1/chat/completions"
    assert chat_url("https://h/v1/chat/completions/") == "https://h/v1/chat/completions"


def test_images_are_sent_as_their_own_encoding() -> None:
    jpeg = b"\xff\xd8\xff\xe0" + b"0" * 16
    assert image_part(jpeg)["image_url"]["url"].startswith("data:image/jpeg;base64,")
    with pytest.raises(JudgeError, match="not PNG, JPEG, GIF or WebP"):
        image_part(b"BM not an accepted image")


def test_the_reward_manager_counts_a_silent_judge_as_a_timeout_and_garbage_as_an_error(
    judge: Judge, test_scorers: ModuleType
) -> None:
    import functools

    judge.answers = [(200, '{"score": 1}', 0.0), (200, "garbage", 0.0), (200, "late", 2.0)]
    registry = ScorerRegistry()
    registry.add("judged", functools.partial(test_scorers.judged, address=judge.address))
    with RewardManager(RewardManagerConfig(num_workers=1, timeout_s=30), registry=registry) as manager:
        result = manager.score_batch(["judged"] * 3, ["a", "b", "c"], ["1", "1", "1"])
    assert [o.status for o in result.outcomes] == ["ok", "error", "timeout"]
    assert result.scores == [1.0, 0.0, 0.0]
    assert "holds no JSON object: 'garbage'" in (result.outcomes[1].error or "")
    assert "did not answer within 0.5 s" in (result.outcomes[2].error or "")
    assert (result.metrics["reward/errors"], result.metrics["reward/timeouts"]) == (1.0, 1.0)
