from __future__ import annotations

import base64
import importlib.util
import io
import json
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import soundfile

from omni_rewards import SCORERS, RewardManager, RewardManagerConfig, ScorerRegistry, compute_score

SCORER_FIXTURES = Path(__file__).parent / "scorer_fixtures"
SERVER_LIFETIME_S = 120.0  # the test HTTP server stops itself after this, whatever happens


# --- verl's reference scorers ------------------------------------------------------------


def _load_verl_module(name: str) -> ModuleType:
    """Load ``verl/utils/reward_score/<name>.py`` by path.

    Importing ``verl`` itself pulls in torch (~30 s); these two files need only the
    standard library and math-verify, so they are loaded on their own.
    """
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        reason = (
            "verl is not installed, so parity with its reference reward scorers cannot be "
            "checked; install the distributed extra (uv sync --extra distributed)"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{reason}. CI must install it.")
        pytest.skip(reason)
    path = Path(spec.origin).parent / "utils" / "reward_score" / f"{name}.py"
    module_spec = importlib.util.spec_from_file_location(f"verl_reference_{name}", path)
    assert module_spec is not None and module_spec.loader is not None, path
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def verl_scorers() -> SimpleNamespace:
    """verl's gsm8k scorer and a reference math scorer with verl's math-verify logic.

    verl's ``math_verify.compute_score`` runs ``_verify_in_subprocess`` in a spawned pool
    and turns any exception into 0.0; the pool needs the module importable by name, so the
    reference calls the same function in-process (main thread: math-verify's own timeouts
    work) with the same exception handling.
    """
    gsm8k = _load_verl_module("gsm8k")
    math_verify = _load_verl_module("math_verify")

    def math_reference(solution_str: str, ground_truth: str) -> float:
        try:
            boxed_truth = "\\boxed{" + ground_truth + "}"
            return float(math_verify._verify_in_subprocess(boxed_truth, solution_str))
        except Exception:
            return 0.0

    def verify_boxed(boxed_truth: str, solution_str: str) -> float:
        try:
            return float(math_verify._verify_in_subprocess(boxed_truth, solution_str))
        except Exception:
            return 0.0

    return SimpleNamespace(
        gsm8k=gsm8k.compute_score, math=math_reference, verify_boxed=verify_boxed
    )


# --- scorers that misbehave, and a manager that runs them -------------------------------


@pytest.fixture(scope="session")
def test_scorers() -> Iterator[ModuleType]:
    sys.path.insert(0, str(SCORER_FIXTURES))
    try:
        import omni_rewards_test_scorers

        yield omni_rewards_test_scorers
    finally:
        sys.path.remove(str(SCORER_FIXTURES))


@pytest.fixture(scope="session")
def registry(test_scorers: ModuleType) -> ScorerRegistry:
    """The built-in scorers plus the misbehaving ones."""
    registry = ScorerRegistry()
    for key in SCORERS.keys():
        registry.add(key, SCORERS.get(key))
    for key, scorer in test_scorers.TEST_SCORERS.items():
        registry.add(key, scorer)
    return registry


@pytest.fixture(scope="session")
def manager(registry: ScorerRegistry) -> Iterator[RewardManager]:
    """Two workers, a 2 s per-sample timeout; shared by the tests (workers start once)."""
    config = RewardManagerConfig(num_workers=2, timeout_s=2.0, on_unknown_data_source="skip")
    with RewardManager(config, registry) as manager:
        manager.start()
        yield manager


# --- a real reward service on loopback ---------------------------------------------------


@dataclass
class ScoringService:
    """Behaviour and records of the local test server."""

    url: str
    fail_next: list[int] = field(default_factory=list)  # statuses to answer before scoring
    required_token: str | None = None
    delay_s: float = 0.0
    raw_answer: bytes | None = None  # answer this instead of scores
    trickle_s: float = 0.0  # send the answer's body one byte per this many seconds
    close_after_answer: bool = False  # close the socket after answering, keep-alive promised
    requests: list[dict[str, Any]] = field(default_factory=list)
    client_ports: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so the client's connection pool is exercised
    service: ScoringService

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        service = self.service
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with service.lock:
            service.requests.append({"headers": dict(self.headers), "body": body})
            service.client_ports.add(self.client_address[1])
            status = service.fail_next.pop(0) if service.fail_next else 200
        if service.delay_s:
            threading.Event().wait(service.delay_s)
        if status == 200 and service.required_token is not None:
            if self.headers.get("Authorization") != f"Bearer {service.required_token}":
                status = 401
        if status != 200:
            self._send(status, b'{"error": "test failure"}')
        elif service.raw_answer is not None:
            self._send(200, service.raw_answer)
        else:
            results = [_score(r) for r in body["requests"]]
            self._send(200, json.dumps({"results": results}).encode())
        if service.close_after_answer:
            # Silently, as a server whose keep-alive expired does: no "Connection: close".
            self.close_connection = True

    def _send(self, status: int, payload: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if not self.service.trickle_s:
                self.wfile.write(payload)
                return
            for position in range(len(payload)):
                self.wfile.write(payload[position : position + 1])
                self.wfile.flush()
                threading.Event().wait(self.service.trickle_s)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (the timeout tests)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def _score(request: dict[str, Any]) -> dict[str, float]:
    """A text request is scored by compute_score. A speech request is decoded as a real
    service would (soundfile, not omni_rewards' own decoder) and answered with what was
    heard: its duration (the score), peak, and the word count of the text sent with it."""
    if "audio_wav_b64" not in request:
        return compute_score(
            request["data_source"],
            request["solution_str"],
            request["ground_truth"],
            request["extra_info"],
        )
    waveform, sample_rate = soundfile.read(
        io.BytesIO(base64.b64decode(request["audio_wav_b64"])), dtype="float32"
    )
    return {
        "score": len(waveform) / sample_rate,
        "peak": float(abs(waveform).max()),
        "words": float(len(request["text"].split())),
        "has_ground_truth": float(request["ground_truth"] is not None),
        "sample_rate_matches": float(sample_rate == request["sample_rate"]),
    }


@pytest.fixture
def scoring_service() -> Iterator[ScoringService]:
    """A JSON scoring server on 127.0.0.1 (a free port), stopped after the test."""
    handler = type("Handler", (_Handler,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    service = ScoringService(url=f"http://{host}:{port}/score")
    handler.service = service
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    watchdog = threading.Timer(SERVER_LIFETIME_S, server.shutdown)
    watchdog.daemon = True
    thread.start()
    watchdog.start()
    try:
        yield service
    finally:
        watchdog.cancel()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
