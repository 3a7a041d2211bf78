"""A judged reward function written as verl-omni writes its own (``omnivideo_qi.py``): verl's
signature (``async def compute_score(..., reward_router_address, reward_model_tokenizer,
**kwargs)``), a ``/v1/chat/completions`` request with a system prompt and content parts, the
answer read from ``choices[0].message.content``. Both engines' judged runs load this one file,
unchanged (``reward.custom_reward_function.path``).

It pays the rule's score (the answer holds the ground truth) and reports how long the judge's
answer was (``judge_chars``): a random tiny judge answers noise, which this function reads but
does not trust. ``strict=true`` raises on an answer without a JSON object, as our own helpers
(``omni_rewards.judge``) do. ``gate`` (a folder) holds the rows from the second step on
(``extra_info["index"] >= 2``) until a test has killed the judge: the row marks ``waiting``,
the test kills the judge's process and marks ``killed``; the row then asks the dead judge.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

SYSTEM = 'You judge answers. Reply with only {"score": <0 or 1>, "reason": "..."}.'
GATE_WAIT_S = 300


def _post(url: str, payload: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def _wait_at(gate: Path) -> None:
    (gate / "waiting").touch()
    deadline = time.monotonic() + GATE_WAIT_S
    while not (gate / "killed").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"nobody killed the judge within {GATE_WAIT_S} s")
        time.sleep(0.1)


async def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any] | None = None,
    reward_router_address: str | None = None, reward_model_tokenizer: Any = None, strict: bool = False,
    gate: str | None = None, **kwargs: Any,
) -> dict[str, float]:
    if gate is not None and int((extra_info or {}).get("index", 0)) >= 2:
        await asyncio.to_thread(_wait_at, Path(gate))
    payload = {
        "model": reward_model_tokenizer.name_or_path,
        "messages": [{"role": "system", "content": SYSTEM},
                     {"role": "user", "content": [{"type": "text", "text":
                         f"Reference: {ground_truth}\nAnswer: {solution_str}"}]}],
        "temperature": 0.0, "top_p": 1.0, "max_tokens": 8,
    }
    result = await asyncio.to_thread(_post, f"http://{reward_router_address}/v1/chat/completions", payload)
    answer = result["choices"][0]["message"]["content"]
    if re.search(r"\{.*?\}", answer) is None and strict:
        raise ValueError(f"no score in the judge's answer {answer!r}")
    return {"score": float(str(ground_truth) in solution_str), "judge_chars": float(len(answer))}
