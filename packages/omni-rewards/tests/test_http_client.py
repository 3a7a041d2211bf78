"""The HTTP scorer client against a real reward service on 127.0.0.1 (see conftest)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from omni_rewards import (
    AudioScoreRequest,
    HttpScorerClient,
    HttpScorerConfig,
    InvalidWaveformError,
    RemoteScorerError,
    ScoreRequest,
    compute_score,
    http_client,
)

REQUESTS = [
    ScoreRequest("openai/gsm8k", f"#### {i}", "3") for i in range(7)
] + [ScoreRequest("mmk12", "<answer>\\boxed{30°}</answer>", "30", {"split": "test"})]


def client_for(url: str, **overrides: object) -> HttpScorerClient:
    settings: dict[str, object] = {"timeout_s": 5.0, "backoff_s": 0.01, "max_backoff_s": 0.05}
    settings.update(overrides)
    return HttpScorerClient(HttpScorerConfig(url=url, **settings))  # type: ignore[arg-type]


def test_batches_are_scored_remotely_in_order(scoring_service) -> None:
    with client_for(scoring_service.url, batch_size=3, pool_size=2) as client:
        results = client.score_batch(REQUESTS)
    assert results == [
        compute_score(r.data_source, r.solution_str, r.ground_truth, r.extra_info) for r in REQUESTS
    ]
    # 8 requests in batches of 3: three POSTs, with the wire format of the module docstring
    bodies = [request["body"] for request in scoring_service.requests]
    assert sorted(len(body["requests"]) for body in bodies) == [2, 3, 3]
    fields = {"data_source", "solution_str", "ground_truth", "extra_info"}
    assert bodies[0]["requests"][0].keys() == fields


def test_connections_are_reused(scoring_service) -> None:
    with client_for(scoring_service.url, pool_size=1) as client:
        for _ in range(5):
            result = client.compute_score("openai/gsm8k", "#### 3", "3")
            assert result == {"score": 1.0, "accuracy": 1.0}
    assert len(scoring_service.requests) == 5
    assert len(scoring_service.client_ports) == 1  # one keep-alive connection served all five


def test_transient_failures_are_retried(scoring_service) -> None:
    scoring_service.fail_next = [503, 500, 429]
    with client_for(scoring_service.url, max_retries=3) as client:
        assert client.compute_score("openai/gsm8k", "#### 3", "3")["score"] == 1.0
    assert len(scoring_service.requests) == 4


def test_408_and_every_5xx_are_retried(scoring_service) -> None:
    # The module documents "408/429/5xx": 408 and 5xx codes beyond 500/502/503/504 included.
    scoring_service.fail_next = [408, 501, 505, 520, 599]
    with client_for(scoring_service.url, max_retries=5) as client:
        assert client.compute_score("openai/gsm8k", "#### 3", "3")["score"] == 1.0
    assert len(scoring_service.requests) == 6


def test_timeout_bounds_the_whole_request_not_each_read(scoring_service) -> None:
    # The answer (~30 bytes) comes a byte every 0.1 s: every single read is quick, the
    # whole takes ~3 s. A 1 s timeout must end the attempt after ~1 s.
    scoring_service.trickle_s = 0.1
    with client_for(scoring_service.url, timeout_s=1.0, max_retries=0) as client:
        start = time.monotonic()
        with pytest.raises(RemoteScorerError, match=r"timed out: .*timeout_s=1 s"):
            client.compute_score("openai/gsm8k", "#### 3", "3")
        elapsed = time.monotonic() - start
    assert 0.9 <= elapsed < 1.8, elapsed


def test_a_trickling_answer_inside_the_timeout_is_read_whole(scoring_service) -> None:
    scoring_service.trickle_s = 0.005
    with client_for(scoring_service.url, timeout_s=5.0, max_retries=0) as client:
        assert client.compute_score("openai/gsm8k", "#### 3", "3") == {
            "score": 1.0,
            "accuracy": 1.0,
        }


def test_a_keep_alive_connection_the_server_closed_is_reopened(scoring_service) -> None:
    # The server drops each connection after answering without saying so; with no retries
    # allowed, the second request can only succeed if the dead connection is not counted.
    scoring_service.close_after_answer = True
    with client_for(scoring_service.url, max_retries=0, pool_size=1) as client:
        for _ in range(3):
            assert client.compute_score("openai/gsm8k", "#### 3", "3")["score"] == 1.0
    assert len(scoring_service.requests) == 3
    assert len(scoring_service.client_ports) == 3


def test_a_connection_closed_while_in_use_is_reopened_once(
    scoring_service, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server closes the idle connection after the client's liveness check passed (a
    # race the check cannot see): the send or the read on it fails, and the request goes
    # again on a new connection, without spending a retry.
    monkeypatch.setattr(http_client, "_looks_open", lambda connection: True)
    scoring_service.close_after_answer = True
    with client_for(scoring_service.url, max_retries=0, pool_size=1) as client:
        for _ in range(3):
            assert client.compute_score("openai/gsm8k", "#### 3", "3")["score"] == 1.0
    assert len(scoring_service.requests) == 3


def test_retries_are_bounded(scoring_service) -> None:
    scoring_service.fail_next = [503] * 10
    with client_for(scoring_service.url, max_retries=2) as client:
        with pytest.raises(RemoteScorerError) as raised:
            client.compute_score("openai/gsm8k", "#### 3", "3")
    assert len(scoring_service.requests) == 3
    assert "failed 3 times; last error: HTTP 503" in str(raised.value)


def test_client_errors_are_not_retried(scoring_service) -> None:
    scoring_service.fail_next = [400]
    with client_for(scoring_service.url) as client:
        with pytest.raises(RemoteScorerError, match="refused the request: HTTP 400"):
            client.compute_score("openai/gsm8k", "#### 3", "3")
    assert len(scoring_service.requests) == 1


def test_bearer_token_comes_from_the_environment(
    scoring_service, monkeypatch: pytest.MonkeyPatch
) -> None:
    scoring_service.required_token = "s3cret"
    monkeypatch.setenv("OMNI_TEST_REWARD_TOKEN", "s3cret")
    with client_for(scoring_service.url, token_env="OMNI_TEST_REWARD_TOKEN") as client:
        assert client.compute_score("openai/gsm8k", "#### 3", "3")["score"] == 1.0
    assert scoring_service.requests[0]["headers"]["Authorization"] == "Bearer s3cret"

    monkeypatch.setenv("OMNI_TEST_REWARD_TOKEN", "wrong")
    with client_for(scoring_service.url, token_env="OMNI_TEST_REWARD_TOKEN") as client:
        with pytest.raises(RemoteScorerError, match="HTTP 401.*Check the bearer token") as raised:
            client.compute_score("openai/gsm8k", "#### 3", "3")
    assert "wrong" not in str(raised.value)  # the token is never echoed

    monkeypatch.delenv("OMNI_TEST_REWARD_TOKEN")
    with client_for(scoring_service.url, token_env="OMNI_TEST_REWARD_TOKEN") as client:
        unset = "'OMNI_TEST_REWARD_TOKEN', which is unset or empty"
        with pytest.raises(RemoteScorerError, match=unset):
            client.compute_score("openai/gsm8k", "#### 3", "3")


def test_a_slow_service_times_out_and_is_retried(scoring_service) -> None:
    scoring_service.delay_s = 0.5
    with client_for(scoring_service.url, timeout_s=0.1, max_retries=1) as client:
        timed_out = r"failed 2 times; last error: timed out: no complete answer within timeout_s=0.1 s"
        with pytest.raises(RemoteScorerError, match=timed_out):
            client.compute_score("openai/gsm8k", "#### 3", "3")


def test_an_unreachable_service_fails_after_the_retries() -> None:
    # Port 9 on loopback (discard) is closed on test machines: connection refused.
    with client_for("http://127.0.0.1:9/score", max_retries=1) as client:
        refused = "failed 2 times; last error: ConnectionRefusedError"
        with pytest.raises(RemoteScorerError, match=refused):
            client.compute_score("openai/gsm8k", "#### 3", "3")


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"not json", "answered invalid JSON: not json"),
        (b'{"scores": []}', "must answer"),
        (b'{"results": []}', "sent 1, got 0 results"),
        (b'{"results": [{"accuracy": 1}]}', 'with a "score" key'),
    ],
)
def test_malformed_answers_are_reported(scoring_service, answer: bytes, message: str) -> None:
    scoring_service.raw_answer = answer
    with client_for(scoring_service.url) as client, pytest.raises(RemoteScorerError, match=message):
        client.compute_score("openai/gsm8k", "#### 3", "3")


def test_config_is_validated_all_at_once() -> None:
    with pytest.raises(ValueError) as raised:
        HttpScorerConfig(url="ftp://host/x", timeout_s=0, max_retries=-1)
    message = str(raised.value)
    assert "url must be an http(s) URL" in message
    assert "timeout_s must be > 0" in message
    assert "max_retries must be >= 0" in message


# --- speech requests: the audio wire format of the module docstring ----------------------

SAMPLE_RATE = 16000


def tone(seconds: float, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (amplitude * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def test_speech_is_sent_as_a_wav_file_and_scored(scoring_service) -> None:
    requests = [
        AudioScoreRequest(tone(1.5), SAMPLE_RATE, "one two three", "ref transcript"),
        AudioScoreRequest(tone(0.25, amplitude=0.8), SAMPLE_RATE, "hi", None),
    ]
    with client_for(scoring_service.url) as client:
        results = client.score_batch(requests)
    # The service decoded each with soundfile: 1.5 s and 0.25 s of audio, peaks 0.5 and 0.8
    # (within one 16-bit step), the text's words, whether a ground truth came along.
    assert results[0]["score"] == 1.5 and results[1]["score"] == 0.25
    assert results[0]["peak"] == pytest.approx(0.5, abs=2 / 32768)
    assert results[1]["peak"] == pytest.approx(0.8, abs=2 / 32768)
    assert [r["words"] for r in results] == [3.0, 1.0]
    assert [r["has_ground_truth"] for r in results] == [1.0, 0.0]
    assert [r["sample_rate_matches"] for r in results] == [1.0, 1.0]
    sent = scoring_service.requests[0]["body"]["requests"][0]
    assert sent.keys() == {"audio_wav_b64", "sample_rate", "text", "ground_truth"}
    assert (sent["sample_rate"], sent["text"], sent["ground_truth"]) == (
        16000,
        "one two three",
        "ref transcript",
    )


def test_speech_requests_are_retried_like_text(scoring_service) -> None:
    scoring_service.fail_next = [503, 429]
    with client_for(scoring_service.url, max_retries=2) as client:
        [result] = client.score_batch([AudioScoreRequest(tone(0.5), SAMPLE_RATE, "a b")])
    assert result["score"] == 0.5
    assert len(scoring_service.requests) == 3


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"<html>bad gateway</html>", "answered invalid JSON"),
        (b'{"results": [{"wer": 0.1}]}', 'with a "score" key'),
        (b'{"results": [{"score": "0.9"}]}', "non-numeric 'score'"),
        (b'{"results": [{"score": NaN}]}', r"score=nan; scores must be finite"),
        (b'{"results": [{"score": Infinity}]}', r"score=inf; scores must be finite"),
    ],
)
def test_malformed_or_non_finite_speech_scores_are_errors(
    scoring_service, answer: bytes, message: str
) -> None:
    scoring_service.raw_answer = answer
    request = AudioScoreRequest(tone(0.5), SAMPLE_RATE, "a b")
    with client_for(scoring_service.url) as client:
        with pytest.raises(RemoteScorerError, match=message):
            client.score_batch([request])
        [outcome] = client.score_each([request])
    assert isinstance(outcome, RemoteScorerError)  # an error to count, not a 0


def test_score_each_fails_only_the_requests_a_failure_touches(scoring_service) -> None:
    # Batches of 2: the first batch's answer has a NaN for its second request only; the
    # second batch is answered by the service; the NaN waveform is never sent.
    good = AudioScoreRequest(tone(0.5), SAMPLE_RATE, "a b")
    broken = AudioScoreRequest(np.full(100, np.nan, np.float32), SAMPLE_RATE, "a b")
    with client_for(scoring_service.url, batch_size=2, pool_size=1) as client:
        scoring_service.raw_answer = b'{"results": [{"score": 0.7}, {"score": NaN}]}'
        outcomes = client.score_each([good, good, broken])
    assert outcomes[0] == {"score": 0.7}
    assert isinstance(outcomes[1], RemoteScorerError) and "finite" in str(outcomes[1])
    assert isinstance(outcomes[2], InvalidWaveformError)
    assert [len(r["body"]["requests"]) for r in scoring_service.requests] == [2]


def test_a_failed_batch_fails_each_of_its_requests(scoring_service) -> None:
    scoring_service.fail_next = [500, 500]
    request = AudioScoreRequest(tone(0.5), SAMPLE_RATE, "a b")
    with client_for(scoring_service.url, max_retries=1) as client:
        outcomes = client.score_each([request, request])
    assert all(isinstance(o, RemoteScorerError) for o in outcomes)
    assert "failed 2 times; last error: HTTP 500" in str(outcomes[0])
