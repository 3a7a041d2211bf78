"""Ask a judge model for a score, over an OpenAI-compatible ``/v1/chat/completions``.

A judged reward is a rubric, the response and its media sent to a judge, and a number read
back. verl's reward model hands a user's reward function the judge's address
(``reward_router_address``, ``host:port``) and its tokenizer (``reward_model_tokenizer``); the
local engine serves its judge the same way (:mod:`omni_rollout.chat_server`). With this module
a judged reward is a few lines::

    from omni_rewards.judge import ajudge_score

    async def compute_score(data_source, solution_str, ground_truth, extra_info=None,
                            reward_router_address=None, reward_model_tokenizer=None, **kwargs):
        verdict = await ajudge_score(
            reward_router_address,
            f"Reference: {ground_truth}\\nAnswer: {solution_str}\\n"
            'Reply with JSON: {"score": 1 if the answer matches the reference, else 0}',
            model=getattr(reward_model_tokenizer, "name_or_path", None))
        return verdict.score

It works against any OpenAI-compatible server (vLLM, verl's reward router, a hosted API).

Failures are failures: a judge that does not answer in time raises :class:`JudgeTimeoutError`
(a ``TimeoutError``, which the reward manager counts as ``reward_timeout``); one that errors or
answers without a readable score raises :class:`JudgeError` / :class:`JudgeAnswerError`
(counted as ``reward_error``, with the reason). Nothing here returns 0 for an unreadable answer;
a user's function that wants that catches the error itself.

Light: standard library only (reward workers import it).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_rewards.errors import RewardError
from omni_rewards.http_client import is_retryable_status

CHAT_PATH = "/v1/chat/completions"
_IMAGE_TYPES = {b"\x89PNG": "image/png", b"\xff\xd8\xff": "image/jpeg", b"GIF8": "image/gif", b"RIFF": "image/webp"}


class JudgeError(RewardError, RuntimeError):
    """The judge could not be asked, or answered with an error."""


class JudgeTimeoutError(JudgeError, TimeoutError):
    """The judge did not answer within the deadline."""


class JudgeAnswerError(JudgeError, ValueError):
    """The judge answered, but without a readable score."""


@dataclass(frozen=True)
class Verdict:
    """A judge's score (clamped to the rubric's range) and the answer it was read from."""

    score: float
    answer: str
    reason: str = ""


def chat_url(address: str) -> str:
    """The chat endpoint of ``address``: ``host:port`` (as verl passes ``reward_router_address``),
    a base URL, or the endpoint itself."""
    if not address:
        raise JudgeError("no judge address: enable reward.reward_model (or pass the address of an "
                         "OpenAI-compatible server)")
    url = address if "://" in address else f"http://{address}"
    url = url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    return url + ("/chat/completions" if url.endswith("/v1") else CHAT_PATH)


def image_part(image: Any) -> dict[str, Any]:
    """One image as a chat ``image_url`` part (a data URI): a file path, encoded bytes, a PIL
    image, or an ``[H, W, 3]`` uint8 array (a video frame)."""
    if isinstance(image, (str, Path)):
        data = Path(image).read_bytes()
    elif isinstance(image, (bytes, bytearray)):
        data = bytes(image)
    else:
        data = _png(image)
    kind = next((mime for magic, mime in _IMAGE_TYPES.items() if data.startswith(magic)), None)
    if kind is None:
        raise JudgeError(f"an image for the judge is not PNG, JPEG, GIF or WebP (starts {data[:8]!r})")
    return {"type": "image_url", "image_url": {"url": f"data:{kind};base64,{base64.b64encode(data).decode()}"}}


def _png(image: Any) -> bytes:
    from PIL import Image  # a PIL image or an array; Pillow comes with transformers

    picture = image if isinstance(image, Image.Image) else Image.fromarray(image)
    buffer = io.BytesIO()
    picture.convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def judge_messages(rubric: str, *, images: Sequence[Any] = (), system: str | None = None) -> list[dict[str, Any]]:
    """Chat messages asking ``rubric`` about ``images`` (shown before the text, as judges are
    prompted), with an optional system prompt."""
    content = [*(image_part(image) for image in images), {"type": "text", "text": rubric}]
    return [*([{"role": "system", "content": system}] if system else []), {"role": "user", "content": content}]


def chat_completion(
    address: str, messages: Sequence[Mapping[str, Any]], *, model: str | None = None, max_tokens: int = 256,
    temperature: float = 0.0, top_p: float = 1.0, timeout_s: float = 300.0, retries: int = 2,
    backoff_s: float = 0.5,
) -> str:
    """The judge's answer to ``messages`` (greedy by default). A refused connection or a 408,
    429 or 5xx answer (a judge restarting behind verl's router) is retried ``retries`` times,
    ``backoff_s`` apart and doubling; a timeout is not (``timeout_s`` bounds each attempt).

    Raises:
        JudgeTimeoutError: no answer within ``timeout_s``.
        JudgeError: the server could not be reached, answered an HTTP error, or a body without
            ``choices[0].message.content``.
    """
    url = chat_url(address)
    payload: dict[str, Any] = {"messages": list(messages), "max_tokens": max_tokens,
                               "temperature": temperature, "top_p": top_p}
    if model:
        payload["model"] = model
    body = json.dumps(payload).encode()
    for attempt in range(retries + 1):
        try:
            answer = _post(url, body, timeout_s)
            break
        except _Retryable as exc:
            if attempt == retries:
                raise JudgeError(f"{exc} (after {retries + 1} attempts)") from exc.__cause__
            time.sleep(backoff_s * 2**attempt)
    try:
        content = json.loads(answer)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise JudgeError(f"the judge at {url} answered without choices[0].message.content: {answer[:300]!r}") from exc
    if not isinstance(content, str):
        raise JudgeError(f"the judge at {url} answered a {type(content).__name__} as its message content")
    return content


class _Retryable(JudgeError):
    """A failure another attempt may not meet."""


def _post(url: str, body: bytes, timeout_s: float) -> bytes:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return bytes(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:500].decode(errors="replace")
        error = _Retryable if is_retryable_status(exc.code) else JudgeError
        raise error(f"the judge at {url} answered HTTP {exc.code}: {detail}") from exc
    except (TimeoutError, socket.timeout) as exc:
        raise JudgeTimeoutError(f"the judge at {url} did not answer within {timeout_s:g} s") from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, (TimeoutError, socket.timeout)):
            raise JudgeTimeoutError(f"the judge at {url} did not answer within {timeout_s:g} s") from exc
        raise _Retryable(f"the judge at {url} cannot be reached: {exc.reason}") from exc
    except (ConnectionError, OSError) as exc:
        raise _Retryable(f"the judge at {url} dropped the connection: {type(exc).__name__}: {exc}") from exc


def parse_score(answer: str, *, key: str = "score", low: float = 0.0, high: float = 1.0) -> tuple[float, str]:
    """The number under ``key`` in the first JSON object of ``answer`` that has it (a fenced block too),
    clamped to ``[low, high]``, and the object's ``reason`` if it gives one.

    Raises:
        JudgeAnswerError: no JSON object, no ``key``, or a value that is not a finite number.
    """
    text = re.sub(r"\A\s*```(?:json)?\s*|\s*```\s*\Z", "", answer.strip(), flags=re.IGNORECASE)
    objects = []
    decoder = json.JSONDecoder()
    for start in (match.start() for match in re.finditer(r"\{", text)):
        try:
            found, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(found, dict):
            objects.append(found)
    if not objects:
        raise JudgeAnswerError(f"the judge's answer holds no JSON object: {_excerpt(answer)}")
    found = next((item for item in objects if key in item), None)
    if found is None:
        raise JudgeAnswerError(f"the judge's JSON has no {key!r}: {_excerpt(answer)}")
    value = found[key]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise JudgeAnswerError(f"the judge's {key!r} is not a number: {_excerpt(answer)}")
    try:
        number = float(value)
    except ValueError:
        raise JudgeAnswerError(f"the judge's {key!r} is not a number: {_excerpt(answer)}") from None
    if not math.isfinite(number):
        raise JudgeAnswerError(f"the judge's {key!r} is not finite: {_excerpt(answer)}")
    return min(max(number, low), high), str(found.get("reason") or "")


def judge_score(
    address: str, rubric: str, *, images: Sequence[Any] = (), system: str | None = None, key: str = "score",
    low: float = 0.0, high: float = 1.0, **chat: Any,
) -> Verdict:
    """Ask the judge ``rubric`` about ``images`` and read its score (``chat``: keywords of
    :func:`chat_completion`: ``model``, ``max_tokens``, ``timeout_s`` ...).

    Raises:
        JudgeTimeoutError, JudgeError, JudgeAnswerError: as :func:`chat_completion` and :func:`parse_score`.
    """
    answer = chat_completion(address, judge_messages(rubric, images=images, system=system), **chat)
    score, reason = parse_score(answer, key=key, low=low, high=high)
    return Verdict(score, answer, reason)


async def ajudge_score(address: str, rubric: str, **options: Any) -> Verdict:
    """:func:`judge_score` for an ``async`` reward function (verl-omni's judged rewards are)."""
    return await asyncio.to_thread(judge_score, address, rubric, **options)


def _excerpt(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "...")
