"""The talker's placeholders in omni_qwen3's pipelines: upstream's length rule, for any role ids.

Checked against upstream's own function on a generated corpus of chats: a chat written with
a checkpoint's ids gets the placeholder upstream gives the same chat written with the
released ids.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from omni_qwen3.vllm_stage_inputs import RELEASED_ROLE_IDS, ROLE_IDS_KEY, as_released_ids, thinker2talker_token_only

pytest.importorskip("vllm_omni", reason="needs the gpu or cpu-rollout extra")

TINY_ROLE_IDS = {"im_start": 1, "system": 345, "user": 341, "assistant": 332}
CONTENT = [t for t in range(2, 160000) if t not in TINY_ROLE_IDS.values() and t not in RELEASED_ROLE_IDS.values()]


def _chat(rng: random.Random, roles: dict[str, int], collide: bool) -> list[int]:
    """A chat prompt: an optional system turn, user/assistant turns, the assistant's turn open.
    With ``collide``, some content tokens equal the released role ids (plain text in a
    checkpoint whose role ids differ)."""
    def content() -> list[int]:
        tokens = [rng.choice(CONTENT) for _ in range(rng.randint(0, 12))]
        if collide and tokens:
            tokens[rng.randrange(len(tokens))] = rng.choice(list(RELEASED_ROLE_IDS.values()))
        return tokens

    turns = (["system"] if rng.random() < 0.5 else []) + ["user", "assistant"] * rng.randint(0, 2) + ["user"]
    ids: list[int] = []
    for role in turns:
        ids += [roles["im_start"], roles[role], 10, *content(), 11, 10]
    return ids + [roles["im_start"], roles["assistant"], 10]


def _thinker_output(prompt: list[int], answer: list[int]) -> Any:
    return SimpleNamespace(request_id="r", prompt_token_ids=prompt, outputs=[SimpleNamespace(cumulative_token_ids=answer)])


def _upstream_length(prompt: list[int], answer: list[int]) -> int:
    from vllm_omni.model_executor.stage_input_processors import qwen3_omni as upstream

    [placeholder] = upstream.thinker2talker_token_only([_thinker_output(prompt, answer)], None)
    return len(placeholder["prompt_token_ids"])


def test_a_checkpoints_ids_get_upstreams_placeholder_for_the_same_chat_in_released_ids() -> None:
    rng = random.Random(0)
    for case in range(300):
        seed = rng.random()
        tiny = _chat(random.Random(seed), TINY_ROLE_IDS, collide=case % 2 == 1)
        released = as_released_ids(tiny, TINY_ROLE_IDS)
        answer = [rng.choice(CONTENT) for _ in range(rng.randint(1, 20))]
        prompt = {"prompt_token_ids": tiny, "additional_information": {ROLE_IDS_KEY: TINY_ROLE_IDS}}
        [ours] = thinker2talker_token_only([_thinker_output(tiny, answer)], prompt)
        expected = _upstream_length(released, answer)
        assert expected > 0
        assert ours["prompt_token_ids"] == [0] * expected, case


def test_without_role_ids_the_placeholders_are_upstreams() -> None:
    rng = random.Random(1)
    for _ in range(50):
        chat = _chat(rng, dict(RELEASED_ROLE_IDS), collide=False)
        [ours] = thinker2talker_token_only([_thinker_output(chat, [5, 6])], {"prompt_token_ids": chat})
        assert len(ours["prompt_token_ids"]) == _upstream_length(chat, [5, 6]) > 0


def test_upstream_still_sizes_the_talker_with_the_released_ids_only() -> None:
    """Canary: upstream's placeholder for a chat in other ids is empty (the defect the module
    works around). When upstream reads the checkpoint's ids, this fails: drop the work-around."""
    chat = _chat(random.Random(2), TINY_ROLE_IDS, collide=False)
    assert _upstream_length(chat, [5]) == 0


def test_a_streaming_session_is_refused() -> None:
    with pytest.raises(NotImplementedError, match="streaming"):
        thinker2talker_token_only([], None, False, SimpleNamespace(enabled=True))
