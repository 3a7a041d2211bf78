"""OmniVideo-R1 QI's judged reward against a real judge: the tiny QI judge (``trainer tiny-judge
--qi``, the tiny Qwen2-VL taught ``qi_judge_rule``) served by the local engine's chat endpoint.
A response's spans are cut from a real clip, sent as JPEG frames, read by the judge's own
processor, and its verdicts (one number per rubric) added as Eq. (8) in their places."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from omni_rewards.scorers import omnivideo_qi_judge as qi

pytestmark = pytest.mark.slow  # the judge is built once per cache (about two minutes on 2 cores)


def test_the_tiny_qi_judges_verdicts_land_in_their_places_of_eq_8(tmp_path: Path) -> None:
    from omni_model_kit.tiny_judge import AGREEMENT_FILE
    from omni_rollout.chat_server import ChatServer, ChatServerSettings
    from omni_data.builtin import write_clip
    from omni_trainer.builtin_files import QI_VERDICTS, qi_judge

    judge = qi_judge()
    assert json.loads((judge / AGREEMENT_FILE).read_text())["agreement"] >= 0.98
    clip = tmp_path / "clip.mp4"  # 3 s at 4 fps
    tone = (0.3 * np.sin(2 * np.pi * 330 * np.arange(48_000) / 16_000)).astype(np.float32)
    write_clip(clip, [np.full((32, 32, 3), 20 * i, np.uint8) for i in range(12)], 4, tone[None], 16_000)
    info = {"is_multiple_choice": False, "question": "What opens?", "video_path": str(clip)}

    def grounded(spans: list[tuple[str, str]]) -> str:
        pairs = "".join(f"<time>{s}-{e}</time><caption>a door opens</caption>" for s, e in spans)
        return f"{pairs}<thinking>Hmm.</thinking><answer>a window</answer>"

    settings = ChatServerSettings(str(judge), prompt_length=4096, response_length=256, max_num_seqs=8)
    with ChatServer(settings) as served:
        tokenizer = SimpleNamespace(name_or_path=str(judge))
        inside, past_the_end = (asyncio.run(qi.compute_score(
            "omnivideo_r1_qi", grounded(spans), "a door", info, reward_router_address=served.address,
            reward_model_tokenizer=tokenizer)) for spans in ([("0.0", "1.0"), ("1.5", "2.9")], [("0.0", "1.0"), ("5.0", "6.0")]))
    consistency, completeness, answer = (QI_VERDICTS[k] for k in ("consistency", "completeness", "answer"))
    assert inside == {"score": 1.0 + answer + 0.5 * (consistency + completeness), "format": 1.0, "answer": answer,
                      "consistency": consistency, "completeness": completeness,
                      "intent": 0.5 * (consistency + completeness), "num_groundings": 2.0, "decode_failures": 0.0}
    # A span past the clip's end: its consistency 0, no completeness asked.
    assert past_the_end == {"score": 1.0 + answer + 0.5 * consistency / 2, "format": 1.0, "answer": answer,
                            "consistency": consistency / 2, "completeness": 0.0, "intent": 0.5 * consistency / 2,
                            "num_groundings": 2.0, "decode_failures": 1.0}
