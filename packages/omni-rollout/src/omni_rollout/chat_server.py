"""An OpenAI-compatible chat endpoint on localhost, answered by a transformers model in this
process: the local engine's judge (``reward.reward_model``).

verl serves a judge with vLLM behind a router and hands a reward function its address; the
local engine starts a :class:`ChatServer` instead, on ``127.0.0.1``, so the same reward
function (``omni_rewards.judge``, or verl-omni's own) works on both engines.

- ``POST /v1/chat/completions``: ``messages`` (text, or content parts of ``text`` and
  ``image_url`` data URIs), ``max_tokens``, ``temperature``, ``top_p``, ``model`` (optional; if
  given, the served model's path or folder name, as vLLM checks it). The answer is OpenAI's
  ``chat.completion`` object, with ``finish_reason`` and ``usage``.
- ``GET /v1/models``: the served model.

Requests that arrive together are answered in one left-padded ``generate`` of at most
``max_num_seqs`` prompts. A bad request is answered 400 and a wrong model 404, each with
OpenAI's ``{"error": {"message", "type"}}``; a prompt longer than ``prompt_length`` is refused
(400), never cut; ``max_tokens`` is capped at ``response_length``.
"""

from __future__ import annotations

import base64
import io
import json
import queue
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
GATHER_S = 0.005
"""A batch closes when no request has arrived for this long (or at ``max_num_seqs``)."""


@dataclass(frozen=True)
class ChatServerSettings:
    """What the judge is and how it answers (verl's ``reward.reward_model.rollout`` keys)."""

    model_path: str
    device: str = "cpu"
    dtype: str = "float32"
    prompt_length: int = 2048
    response_length: int = 256
    max_num_seqs: int = 8
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    host: str = "127.0.0.1"
    port: int = 0


class RequestError(ValueError):
    """A request the server refuses (HTTP ``status``)."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ChatRequest:
    """One parsed request: its conversation, images, and sampling."""

    messages: list[dict[str, Any]]
    images: list[Any]
    max_tokens: int
    temperature: float
    top_p: float


def decode_image(url: str) -> Any:
    """A PIL image from a ``data:image/...;base64,`` URI (the judge reaches no network)."""
    from PIL import Image

    if not url.startswith("data:image/") or ";base64," not in url:
        raise RequestError("image_url must be a data:image/...;base64 URI (this judge fetches nothing)")
    try:
        return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1], validate=True))).convert("RGB")
    except Exception as exc:
        raise RequestError(f"image_url does not decode to an image: {type(exc).__name__}: {exc}") from exc


def parse_request(body: Mapping[str, Any], settings: ChatServerSettings, takes_images: bool) -> ChatRequest:
    """The request in ``body``, or :class:`RequestError` naming what is wrong with it."""
    model = body.get("model")
    if model and model not in (settings.model_path, Path(settings.model_path).name):
        raise RequestError(f"The model {model!r} is not served here; this server serves {settings.model_path!r}",
                           HTTPStatus.NOT_FOUND)
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise RequestError("messages must be a non-empty list")
    messages, images = [], []
    for message in raw:
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise RequestError("each message needs a role and a content")
        content = message.get("content")
        if isinstance(content, str):
            parts: list[dict[str, Any]] = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            parts = []
            for part in content:
                kind = part.get("type") if isinstance(part, Mapping) else None
                if kind == "text" and isinstance(part.get("text"), str):
                    parts.append({"type": "text", "text": part["text"]})
                elif kind == "image_url" and isinstance(part.get("image_url"), Mapping):
                    if not takes_images:
                        raise RequestError(f"the judge {settings.model_path} takes no images")
                    images.append(decode_image(str(part["image_url"].get("url", ""))))
                    parts.append({"type": "image"})
                else:
                    raise RequestError(f"unsupported content part: {str(part)[:100]}")
        else:
            raise RequestError("a message's content must be a string or a list of parts")
        messages.append({"role": message["role"], "content": parts})
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens", settings.response_length))
    temperature = body.get("temperature", settings.temperature)
    top_p = body.get("top_p", settings.top_p)
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise RequestError("max_tokens must be a positive integer")
    if not isinstance(temperature, (int, float)) or temperature < 0:
        raise RequestError("temperature must be a number >= 0")
    if not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise RequestError("top_p must be in (0, 1]")
    return ChatRequest(messages, images, min(max_tokens, settings.response_length), float(temperature), float(top_p))


class ChatModel:
    """The judge: a processor (or tokenizer) and a generating model on one device."""

    def __init__(self, settings: ChatServerSettings) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

        self.settings = settings
        try:
            processor = AutoProcessor.from_pretrained(settings.model_path)
        except (OSError, ValueError, KeyError):
            processor = AutoTokenizer.from_pretrained(settings.model_path)
        self.takes_images = getattr(processor, "image_processor", None) is not None
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", processor)
        model_class: Any = AutoModelForImageTextToText if self.takes_images else AutoModelForCausalLM
        self.model: Any = model_class.from_pretrained(settings.model_path, dtype=getattr(torch, settings.dtype))
        self.model.to(settings.device).eval()

    def encode(self, requests: Sequence[ChatRequest]) -> tuple[dict[str, Any], list[int]]:
        """The batch's left-padded inputs and each prompt's length; a prompt over
        ``prompt_length`` is a :class:`RequestError`."""
        render = self.processor if self.takes_images else self.tokenizer
        texts = [render.apply_chat_template(self._chat(r), add_generation_prompt=True, tokenize=False)
                 for r in requests]
        self.tokenizer.padding_side = "left"
        if self.takes_images:
            images = [image for r in requests for image in r.images] or None
            inputs = self.processor(text=texts, images=images, padding=True, return_tensors="pt")
        else:
            inputs = self.tokenizer(texts, padding=True, return_tensors="pt", add_special_tokens=False)
        lengths = inputs["attention_mask"].sum(dim=1).tolist()
        return dict(inputs), [int(n) for n in lengths]

    def _chat(self, request: ChatRequest) -> list[dict[str, Any]]:
        if self.takes_images:
            return request.messages
        return [{"role": m["role"], "content": "".join(p["text"] for p in m["content"])} for m in request.messages]

    def answer(self, requests: Sequence[ChatRequest]) -> list[tuple[str, str, int, int]]:
        """``(text, finish_reason, prompt_tokens, completion_tokens)`` per request, from one
        ``generate`` (the batch shares its sampling: the server groups requests by it)."""
        import torch

        inputs, lengths = self.encode(requests)
        first = requests[0]
        greedy = first.temperature == 0
        options: dict[str, Any] = {"do_sample": not greedy}
        if not greedy:
            options.update(temperature=first.temperature, top_p=first.top_p,
                           top_k=self.settings.top_k if self.settings.top_k > 0 else None)
        inputs = {k: v.to(self.settings.device) if hasattr(v, "to") else v for k, v in inputs.items()}
        width = inputs["input_ids"].shape[1]
        with torch.no_grad():
            out = self.model.generate(**inputs, max_new_tokens=max(r.max_tokens for r in requests),
                                      pad_token_id=self.tokenizer.pad_token_id, **options)
        eos = set(self._eos_ids())
        results = []
        for row, request, length in zip(out[:, width:].tolist(), requests, lengths, strict=True):
            tokens = row[:request.max_tokens]
            stop = next((i for i, token in enumerate(tokens) if token in eos), None)
            kept = tokens if stop is None else tokens[:stop]
            text = self.tokenizer.decode(kept, skip_special_tokens=True)
            results.append((text, "length" if stop is None else "stop", length, len(kept) + (stop is not None)))
        return results

    def _eos_ids(self) -> list[int]:
        eos = self.model.generation_config.eos_token_id
        ids = eos if isinstance(eos, list) else [eos] if eos is not None else []
        return [*ids, *([self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else [])]


class ChatServer:
    """:class:`ChatModel` behind ``/v1/chat/completions`` on ``settings.host``; use as a context
    manager, or :meth:`start` and :meth:`close`. :attr:`address` is ``host:port`` (verl's
    ``reward_router_address``)."""

    def __init__(self, settings: ChatServerSettings, model: ChatModel | None = None) -> None:
        self.settings = settings
        self.model = model if model is not None else ChatModel(settings)
        self._pending: queue.Queue[tuple[ChatRequest, Future[tuple[str, str, int, int]]] | None] = queue.Queue()
        self._http = ThreadingHTTPServer((settings.host, settings.port), self._handler())
        self._http.daemon_threads = True
        self._threads = [threading.Thread(target=self._http.serve_forever, name="judge-http", daemon=True),
                         threading.Thread(target=self._generate_loop, name="judge-generate", daemon=True)]
        self.served = 0
        self.batches = 0
        self._started = False

    @property
    def address(self) -> str:
        host, port = self._http.server_address[:2]
        return f"{host!s}:{port}"

    def start(self) -> ChatServer:
        for thread in self._threads:
            thread.start()
        self._started = True
        return self

    def close(self) -> None:
        if self._started:
            self._http.shutdown()
        self._http.server_close()
        self._pending.put(None)
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=30)

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, request: ChatRequest) -> Future[tuple[str, str, int, int]]:
        future: Future[tuple[str, str, int, int]] = Future()
        self._pending.put((request, future))
        return future

    def _generate_loop(self) -> None:
        while True:
            item = self._pending.get()
            if item is None:
                return
            batch = [item]
            while len(batch) < self.settings.max_num_seqs:  # requests arriving together share a generate
                try:
                    more = self._pending.get(timeout=GATHER_S)
                except queue.Empty:
                    break
                if more is None:
                    self._pending.put(None)
                    break
                batch.append(more)
            self.batches += 1
            groups: dict[tuple[float, float], list[tuple[ChatRequest, Future[Any]]]] = {}
            for request, future in batch:
                groups.setdefault((request.temperature, request.top_p), []).append((request, future))
            for group in groups.values():
                self._answer(group)

    def _answer(self, group: list[tuple[ChatRequest, Future[Any]]]) -> None:
        try:
            inputs, lengths = self.model.encode([request for request, _ in group])
        except Exception as exc:
            for _, future in group:
                future.set_exception(exc)
            return
        ready = [(r, f) for (r, f), n in zip(group, lengths, strict=True) if n <= self.settings.prompt_length]
        for (request, future), n in zip(group, lengths, strict=True):
            if n > self.settings.prompt_length:
                future.set_exception(RequestError(
                    f"the prompt is {n} tokens; the judge takes at most {self.settings.prompt_length} "
                    "(reward.reward_model.rollout.prompt_length)"))
        if not ready:
            return
        try:
            answers = self.model.answer([request for request, _ in ready])
        except Exception as exc:
            for _, future in ready:
                future.set_exception(exc)
            return
        for (_, future), answer in zip(ready, answers, strict=True):
            self.served += 1
            future.set_result(answer)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # the step line reports failures
                return

            def do_GET(self) -> None:
                if self.path.rstrip("/") != MODELS_PATH:
                    return self._send(HTTPStatus.NOT_FOUND, _error(f"no route {self.path}", "not_found"))
                self._send(HTTPStatus.OK, {"object": "list", "data": [
                    {"id": server.settings.model_path, "object": "model", "owned_by": "omni-rl"}]})

            def do_POST(self) -> None:
                if self.path.rstrip("/") != CHAT_PATH:
                    return self._send(HTTPStatus.NOT_FOUND, _error(f"no route {self.path}", "not_found"))
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                    if not isinstance(body, dict):
                        raise RequestError("the body must be a JSON object")
                    request = parse_request(body, server.settings, server.model.takes_images)
                    text, finish, prompt_tokens, completion_tokens = server.submit(request).result()
                except RequestError as exc:
                    return self._send(exc.status, _error(str(exc), "invalid_request_error"))
                except json.JSONDecodeError as exc:
                    return self._send(HTTPStatus.BAD_REQUEST, _error(f"the body is not JSON: {exc}",
                                                                     "invalid_request_error"))
                except Exception as exc:
                    return self._send(HTTPStatus.INTERNAL_SERVER_ERROR,
                                      _error(f"{type(exc).__name__}: {exc}", "internal_error"))
                self._send(HTTPStatus.OK, {
                    "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                    "model": server.settings.model_path,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": finish}],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                              "total_tokens": prompt_tokens + completion_tokens},
                })

            def _send(self, status: HTTPStatus, payload: Mapping[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind}}
