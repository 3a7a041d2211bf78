"""verl's reward model reaches the user's function through ours: with ``reward.reward_model.enable``
verl's reward manager calls our function with ``reward_router_address`` and
``reward_model_tokenizer``; the user's (async, verl-omni's signature) function gets both in the
scorer process, the tokenizer loaded from the judge's path. Here the judge is the local engine's
endpoint serving the tiny chat model, standing in for verl's router."""

from __future__ import annotations

import textwrap
from pathlib import Path

from omni_verl import reward

FUNCTION = textwrap.dedent('''
    from omni_rewards.judge import chat_completion, judge_messages


    async def compute_score(data_source, solution_str, ground_truth, extra_info=None,
                            reward_router_address=None, reward_model_tokenizer=None, **kwargs):
        answer = chat_completion(reward_router_address, judge_messages(solution_str),
                                 model=reward_model_tokenizer.name_or_path, max_tokens=4)
        return {"score": 0.5, "answered": float(bool(answer)),
                "vocabulary": float(len(reward_model_tokenizer))}
''')


def test_the_judges_address_and_tokenizer_reach_the_users_function(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from omni_model_kit.tiny import build_tiny_chat_lm
    from omni_rollout.chat_server import ChatServer, ChatServerSettings

    path = tmp_path / "judged.py"
    path.write_text(FUNCTION)
    judge = build_tiny_chat_lm()
    tokenizer = AutoTokenizer.from_pretrained(judge)  # what verl's reward loop worker hands over
    with ChatServer(ChatServerSettings(str(judge), response_length=4)) as server:
        result = reward.compute_score("judged_source", "an answer", "1", {"index": 0}, num_workers=1,
                                      custom_path=str(path), reward_router_address=server.address,
                                      reward_model_tokenizer=tokenizer)
        assert server.served == 1
    assert result["reward_ok"] == 1.0 and result["score"] == 0.5
    without = reward.compute_score("judged_source", "an answer", "1", {"index": 0}, num_workers=1,
                                   custom_path=str(path))  # no judge enabled: the function fails, counted
    assert without["reward_error"] == 1.0 and without["score"] == 0.0
