"""A client for a remote reward service speaking JSON over HTTP.

Wire format: ``POST <url>`` with ``{"requests": [<request>, ...]}``; the service answers
``{"results": [{"score": ..., <sub-metric>: ...}, ...]}``, one result per request, in order.
A request is one of:

- text (:class:`ScoreRequest`): ``{"data_source", "solution_str", "ground_truth",
  "extra_info"}``;
- speech (:class:`omni_rewards.audio.AudioScoreRequest`): ``{"audio_wav_b64": <base64 of a
  mono 16-bit PCM WAV file>, "sample_rate": <int, also in the WAV header>, "text": <what the
  talker spoke>, "ground_truth": <str or null>}``; the WAV encoding is documented in
  ``omni_rewards.audio.wav``. A service is written for one kind.

Requests go in batches of ``batch_size``, concurrently over a pool of keep-alive
connections; connection errors, timeouts and 408/429/5xx answers are retried with
exponential backoff, a bounded number of times. ``timeout_s`` is a deadline for each attempt
as a whole (connecting, sending, waiting and reading every byte), so a server that trickles
its answer cannot hold a caller longer. A pooled keep-alive connection that the server has
closed meanwhile is reopened; that is not a failed attempt.

Fail-closed: a batch that still fails after its retries, a malformed answer, or a result
without a finite numeric ``"score"`` is a :class:`RemoteScorerError`, never a 0.
:meth:`HttpScorerClient.score_batch` raises the first; :meth:`HttpScorerClient.score_each`
returns each request's result or error, so a caller can count failures per sample.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import select
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from omni_rewards.api import normalise_output
from omni_rewards.errors import RemoteScorerError, RewardError

# A pooled connection failing like this was closed by the server while idle (keep-alive
# expiry): the request is sent again on a new connection, once, without counting a failure.
_STALE_CONNECTION_ERRORS = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


def is_retryable_status(status: int) -> bool:
    """408 (request timeout), 429 (too many requests) and every 5xx are worth retrying."""
    return status in (408, 429) or 500 <= status <= 599


@dataclass(frozen=True)
class HttpScorerConfig:
    """Where the remote scorer is and how hard to try. Plain data."""

    url: str
    """Endpoint, e.g. ``http://reward-service:8000/score`` (http or https)."""

    timeout_s: float = 30.0
    """Deadline of one attempt as a whole: connect, send, wait and read the whole answer."""

    max_retries: int = 3
    """Retries after the first attempt, for connection errors, timeouts, 408, 429 and 5xx."""

    backoff_s: float = 0.5
    """Delay before the first retry; doubles per retry, capped at ``max_backoff_s``."""

    max_backoff_s: float = 8.0
    """Longest delay between attempts (also caps a server's ``Retry-After``)."""

    token_env: str | None = None
    """Environment variable holding a bearer token (read per request; never logged)."""

    batch_size: int = 64
    """Samples per HTTP request."""

    pool_size: int = 4
    """Keep-alive connections kept open, and batches in flight at once."""

    def __post_init__(self) -> None:
        problems = []
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append(f"url must be an http(s) URL with a host, got {self.url!r}")
        if not self.timeout_s > 0:
            problems.append(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.max_retries < 0:
            problems.append(f"max_retries must be >= 0, got {self.max_retries}")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            problems.append("backoff_s and max_backoff_s must be >= 0")
        if self.batch_size < 1 or self.pool_size < 1:
            problems.append(
                f"batch_size and pool_size must be >= 1, got {self.batch_size} and {self.pool_size}"
            )
        if problems:
            raise ValueError("Invalid HttpScorerConfig: " + "; ".join(problems) + ".")


class WireRequest(Protocol):
    """One sample as the service receives it (the module docstring lists the kinds)."""

    def to_json(self) -> dict[str, Any]:
        """The request's JSON object; raises a ``RewardError`` if the sample cannot be sent."""
        ...


@dataclass(frozen=True)
class ScoreRequest:
    """One text sample to score remotely."""

    data_source: str
    solution_str: str
    ground_truth: str
    extra_info: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "data_source": self.data_source,
            "solution_str": self.solution_str,
            "ground_truth": self.ground_truth,
            "extra_info": dict(self.extra_info) if self.extra_info is not None else None,
        }


class _RetryableError(Exception):
    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class HttpScorerClient:
    """Scores samples with a remote service; thread-safe; close it (or use ``with``)."""

    def __init__(self, config: HttpScorerConfig) -> None:
        self.config = config
        parts = urlsplit(config.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._idle: queue.LifoQueue[http.client.HTTPConnection] = queue.LifoQueue()

    def compute_score(
        self,
        data_source: str,
        solution_str: str,
        ground_truth: str,
        extra_info: Mapping[str, Any] | None = None,
    ) -> dict[str, float]:
        """One sample, in ``omni_rewards.compute_score``'s call shape."""
        request = ScoreRequest(data_source, solution_str, ground_truth, extra_info)
        return self.score_batch([request])[0]

    def score_batch(self, requests: Sequence[WireRequest]) -> list[dict[str, float]]:
        """Score ``requests`` (in batches, concurrently); results in input order.

        Raises:
            RemoteScorerError: a batch still failed after the retries, the service refused
                it (4xx other than 408 and 429), or it answered something other than one result
                with a numeric ``"score"`` per request.
            RewardError: a request could not be encoded (e.g. ``InvalidWaveformError``).
        """
        results = self.score_each(requests)
        for result in results:
            if isinstance(result, RewardError):
                raise result
        return [result for result in results if not isinstance(result, RewardError)]

    def score_each(
        self, requests: Sequence[WireRequest]
    ) -> list[dict[str, float] | RewardError]:
        """Like :meth:`score_batch`, but each request gets its own result or error.

        A request that cannot be encoded gets its ``RewardError`` and is not sent; a batch
        that failed (after the retries) or was answered malformed gives every request in it
        that batch's :class:`RemoteScorerError`; a result without a finite ``"score"`` gives
        its request a :class:`RemoteScorerError`. Never a 0 in place of an error.
        """
        outcomes: list[dict[str, float] | RewardError | None] = [None] * len(requests)
        encoded: list[tuple[int, dict[str, Any]]] = []
        for position, request in enumerate(requests):
            try:
                encoded.append((position, request.to_json()))
            except RewardError as exc:
                outcomes[position] = exc
        size = self.config.batch_size
        batches = [encoded[i : i + size] for i in range(0, len(encoded), size)]
        bodies = [[body for _, body in batch] for batch in batches]
        if len(bodies) <= 1:
            answers = [self._score_one_batch(batch) for batch in bodies]
        else:
            with ThreadPoolExecutor(min(self.config.pool_size, len(bodies))) as executor:
                answers = list(executor.map(self._score_one_batch, bodies))
        for batch, answer in zip(batches, answers, strict=True):
            for index, (position, _) in enumerate(batch):
                outcomes[position] = answer if isinstance(answer, RewardError) else answer[index]
        return [outcome for outcome in outcomes if outcome is not None]

    def close(self) -> None:
        """Close the pooled connections."""
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return

    def __enter__(self) -> HttpScorerClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _score_one_batch(
        self, batch: list[dict[str, Any]]
    ) -> list[dict[str, float] | RewardError] | RemoteScorerError:
        """Each request's result or error, or the error of the batch as a whole."""
        try:
            payload = self._post_with_retries(json.dumps({"requests": batch}).encode())
        except RemoteScorerError as exc:
            return exc
        results = payload.get("results") if isinstance(payload, dict) else None
        if not isinstance(results, list) or len(results) != len(batch):
            got = f"{len(results)} results" if isinstance(results, list) else _short(payload)
            return RemoteScorerError(
                f"The reward service at {self.config.url} must answer "
                f'{{"results": [...]}} with one result per request; sent {len(batch)}, got {got}.'
            )
        return [self._check_result(result) for result in results]

    def _check_result(self, result: object) -> dict[str, float] | RewardError:
        try:
            return normalise_output(result, "the reward service")
        except ValueError as exc:
            error = RemoteScorerError(f"The reward service at {self.config.url}: {exc}")
            error.__cause__ = exc
            return error

    def _post_with_retries(self, body: bytes) -> Any:
        attempts = self.config.max_retries + 1
        for attempt in range(attempts):
            try:
                return self._post(body)
            except _RetryableError as exc:
                if attempt == attempts - 1:
                    raise RemoteScorerError(
                        f"The reward service at {self.config.url} failed {attempts} times; "
                        f"last error: {exc}. Check that it is up, or raise "
                        "max_retries/timeout_s."
                    ) from exc
                delay = self.config.backoff_s * 2**attempt
                if exc.retry_after_s is not None:
                    delay = max(delay, exc.retry_after_s)
                time.sleep(min(delay, self.config.max_backoff_s))
        raise AssertionError("unreachable")  # the loop returns or raises

    def _post(self, body: bytes) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        token = self._token()
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        connection = self._idle_connection()
        if connection is not None:
            try:
                status, data = self._exchange(connection, body, headers, reused=True)
            except _StaleConnectionError:
                connection = None
        if connection is None:
            status, data = self._exchange(self._new_connection(), body, headers, reused=False)
        if is_retryable_status(status):
            raise _RetryableError(f"HTTP {status} {_short(data.body)}", data.retry_after_s)
        if status != 200:
            raise RemoteScorerError(
                f"The reward service at {self.config.url} refused the request: HTTP "
                f"{status} {_short(data.body)}."
                + (" Check the bearer token." if status in (401, 403) else "")
            )
        try:
            return json.loads(data.body)
        except ValueError as exc:
            raise RemoteScorerError(
                f"The reward service at {self.config.url} answered invalid JSON: "
                f"{_short(data.body)}."
            ) from exc

    def _exchange(
        self,
        connection: http.client.HTTPConnection,
        body: bytes,
        headers: dict[str, str],
        *,
        reused: bool,
    ) -> tuple[int, _Answer]:
        """One request and its whole answer, within ``timeout_s`` from now."""
        timeout = self.config.timeout_s
        connection.timeout = timeout  # bounds connect() when the connection is new
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        watchdog = _Watchdog(connection, timeout)
        try:
            connection.request("POST", self._path, body=body, headers=headers)
            response = connection.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException) as exc:
            watchdog.cancel()
            connection.close()
            if watchdog.fired or isinstance(exc, TimeoutError):
                raise _RetryableError(
                    f"timed out: no complete answer within timeout_s={timeout:g} s"
                ) from exc
            if reused and isinstance(exc, _STALE_CONNECTION_ERRORS):
                raise _StaleConnectionError from exc
            raise _RetryableError(f"{type(exc).__name__}: {exc}") from exc
        watchdog.cancel()
        reusable = not response.will_close and not watchdog.fired
        self._release(connection, reusable=reusable)
        retry_after = _retry_after(response.getheader("Retry-After"))
        return response.status, _Answer(payload, retry_after)
    def _token(self) -> str | None:
        name = self.config.token_env
        if name is None:
            return None
        token = os.environ.get(name, "")
        if not token:
            raise RemoteScorerError(
                f"HttpScorerConfig.token_env names the environment variable {name!r}, which "
                "is unset or empty. Export the bearer token there, or set token_env=None."
            )
        return token

    def _idle_connection(self) -> http.client.HTTPConnection | None:
        """A pooled connection that still looks open, or None."""
        while True:
            try:
                connection = self._idle.get_nowait()
            except queue.Empty:
                return None
            if _looks_open(connection):
                return connection
            connection.close()

    def _new_connection(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return kind(self._host, self._port, timeout=self.config.timeout_s)

    def _release(self, connection: http.client.HTTPConnection, *, reusable: bool) -> None:
        if reusable and self._idle.qsize() < self.config.pool_size:
            self._idle.put(connection)
        else:
            connection.close()


class _StaleConnectionError(Exception):
    """A pooled keep-alive connection turned out to be closed by the server."""


class _Answer:
    def __init__(self, body: bytes, retry_after_s: float | None) -> None:
        self.body = body
        self.retry_after_s = retry_after_s


class _Watchdog:
    """Shuts a connection's socket down when its deadline passes, which ends any blocking
    connect, send or read on it at once (socket timeouts bound each read, not their sum)."""

    def __init__(self, connection: http.client.HTTPConnection, timeout_s: float) -> None:
        self._connection = connection
        self._lock = threading.Lock()
        self._cancelled = False
        self.fired = False
        self._timer = threading.Timer(timeout_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._cancelled:
                return
            self.fired = True
            sock = self._connection.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
        self._timer.cancel()


def _looks_open(connection: http.client.HTTPConnection) -> bool:
    """False when an idle connection's socket is gone or readable: an idle keep-alive
    socket only becomes readable when the server closed it (or broke the protocol)."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _short(value: object) -> str:
    text = value.decode(errors="replace") if isinstance(value, bytes) else repr(value)
    return text if len(text) <= 200 else text[:197] + "..."
