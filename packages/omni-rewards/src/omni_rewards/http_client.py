"""A client for a remote reward service speaking JSON over HTTP.

Wire format: ``POST <url>`` with ``{"requests": [{"data_source", "solution_str",
"ground_truth", "extra_info"}, ...]}``; the service answers ``{"results": [{"score": ...,
<sub-metric>: ...}, ...]}``, one result per request, in order. Requests go in batches of
``batch_size``, concurrently over a pool of keep-alive connections; connection errors,
timeouts and 429/5xx answers are retried with exponential backoff, a bounded number of times.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from omni_rewards.api import normalise_output
from omni_rewards.errors import RemoteScorerError

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class HttpScorerConfig:
    """Where the remote scorer is and how hard to try. Plain data."""

    url: str
    """Endpoint, e.g. ``http://reward-service:8000/score`` (http or https)."""

    timeout_s: float = 30.0
    """Socket timeout per attempt (connect and each read)."""

    max_retries: int = 3
    """Retries after the first attempt, for connection errors, timeouts, 429 and 5xx."""

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


@dataclass(frozen=True)
class ScoreRequest:
    """One sample to score remotely."""

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

    def score_batch(self, requests: Sequence[ScoreRequest]) -> list[dict[str, float]]:
        """Score ``requests`` (in batches, concurrently); results in input order.

        Raises:
            RemoteScorerError: a batch still failed after the retries, the service refused
                it (4xx other than 429), or it answered something other than one result
                with a numeric ``"score"`` per request.
        """
        size = self.config.batch_size
        batches = [list(requests[i : i + size]) for i in range(0, len(requests), size)]
        if len(batches) <= 1:
            return self._score_one_batch(batches[0]) if batches else []
        with ThreadPoolExecutor(min(self.config.pool_size, len(batches))) as executor:
            answers = list(executor.map(self._score_one_batch, batches))
        return [result for answer in answers for result in answer]

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

    def _score_one_batch(self, batch: list[ScoreRequest]) -> list[dict[str, float]]:
        body = json.dumps({"requests": [r.to_json() for r in batch]}).encode()
        payload = self._post_with_retries(body)
        results = payload.get("results") if isinstance(payload, dict) else None
        if not isinstance(results, list) or len(results) != len(batch):
            got = f"{len(results)} results" if isinstance(results, list) else _short(payload)
            raise RemoteScorerError(
                f"The reward service at {self.config.url} must answer "
                f'{{"results": [...]}} with one result per request; sent {len(batch)}, got {got}.'
            )
        try:
            return [normalise_output(result, "the reward service") for result in results]
        except ValueError as exc:
            raise RemoteScorerError(f"The reward service at {self.config.url}: {exc}") from exc

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
        connection = self._acquire()
        try:
            connection.request("POST", self._path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise _RetryableError(f"{type(exc).__name__}: {exc}") from exc
        self._release(connection, reusable=not response.will_close)
        if response.status in RETRYABLE_STATUSES:
            raise _RetryableError(
                f"HTTP {response.status} {_short(data)}",
                _retry_after(response.getheader("Retry-After")),
            )
        if response.status != 200:
            raise RemoteScorerError(
                f"The reward service at {self.config.url} refused the request: HTTP "
                f"{response.status} {_short(data)}."
                + (" Check the bearer token." if response.status in (401, 403) else "")
            )
        try:
            return json.loads(data)
        except ValueError as exc:
            raise RemoteScorerError(
                f"The reward service at {self.config.url} answered invalid JSON: {_short(data)}."
            ) from exc

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

    def _acquire(self) -> http.client.HTTPConnection:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return kind(self._host, self._port, timeout=self.config.timeout_s)

    def _release(self, connection: http.client.HTTPConnection, *, reusable: bool) -> None:
        if reusable and self._idle.qsize() < self.config.pool_size:
            self._idle.put(connection)
        else:
            connection.close()


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _short(value: object) -> str:
    text = value.decode(errors="replace") if isinstance(value, bytes) else repr(value)
    return text if len(text) <= 200 else text[:197] + "..."
