"""OmniVideo-R1 QI's judged reward (``omni_rewards.scorers.omnivideo_qi_judge``) against a judge
on localhost that answers per rubric and records what it is shown; and the span frames
(``omni_rewards.video_spans``) against qwen_vl_utils' own arithmetic, which verl-omni's reward
samples its judge's frames with."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from PIL import Image

from omni_rewards.judge import JudgeAnswerError, JudgeError
from omni_rewards.scorers import omnivideo_qi_judge as qi_judge
from omni_rewards.video_spans import SpanError, frame_size, span_frame_count, span_frame_range, span_frames

LEVEL = 12
"""Frame ``i`` of a test clip is grey ``LEVEL * i``: a frame shown to the judge says which it is."""


def write_clip(path: Path, frames: int, fps: int, size: tuple[int, int] = (40, 56)) -> Path:
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.height, stream.width = size
        stream.pix_fmt = "yuv420p"
        stream.options = {"qscale": "1"}
        for i in range(frames):
            image = np.full((*size, 3), LEVEL * i, np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode())
    return path


def frame_number(data_uri: str) -> int:
    data = base64.b64decode(data_uri.split(",", 1)[1])
    assert data.startswith(b"\xff\xd8\xff")  # JPEG, as verl-omni sends its frames
    return round(float(np.asarray(Image.open(io.BytesIO(data))).mean()) / LEVEL)


class RubricJudge:
    """Answers each rubric as told (``answers``: rubric -> the answer text, or a function of the
    request's text); records every request."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}
        self.requests: list[dict[str, Any]] = []
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                judge.requests.append(request)
                rubric = request["messages"][0]["content"]
                text = request["messages"][1]["content"][-1]["text"]
                answer = judge.answers.get(rubric, '{"score": 1}')
                content = answer(text) if callable(answer) else answer
                body = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def asked(self, rubric: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["messages"][0]["content"] == rubric]


@pytest.fixture
def judge() -> Iterator[RubricJudge]:
    served = RubricJudge()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 s at 5 fps: 20 frames."""
    return write_clip(tmp_path_factory.mktemp("qi") / "clip.mp4", frames=20, fps=5)


def response(pairs: list[tuple[str, str, str]], answer: str = "a red door") -> str:
    grounded = "".join(f"<time>{s}-{e}</time><caption>{c}</caption>\n" for s, e, c in pairs)
    return f"{grounded}<thinking>Let me think.</thinking>\n<answer>{answer}</answer>"


def score(judge: RubricJudge, text: str, truth: str = "the blue door", *, multiple_choice: bool = False,
          video: Path | str = "", **kwargs: Any) -> dict[str, float]:
    info = {"is_multiple_choice": multiple_choice, "question": "Which door opens?", "video_path": str(video)}
    return asyncio.run(qi_judge.compute_score(
        "omnivideo_r1_qi", text, truth, info, reward_router_address=judge.address,
        reward_model_tokenizer=SimpleNamespace(name_or_path="judges/qwen3-vl"), **kwargs))


def test_each_pair_its_span_the_stitched_spans_and_an_open_answer_are_judged_and_added_as_eq_8(
    judge: RubricJudge, clip: Path,
) -> None:
    judge.answers = {
        qi_judge.CONSISTENCY_RUBRIC: lambda text: '{"score": 0.8}' if "door" in text else '{"score": 0.6}',
        qi_judge.COMPLETENESS_RUBRIC: '```json\n{"score": 0.5, "reason": "loose"}\n```',
        qi_judge.ANSWER_RUBRIC: '{"score": 1.7}',  # clamped to 1
    }
    text = response([("0.0", "1.0", "a door opens"), ("2.0", "3.9", "a dog barks")])
    result = score(judge, text, video=clip)
    assert result == {"score": 1.0 + 1.0 + 0.5 * (0.7 + 0.5), "format": 1.0, "answer": 1.0, "consistency": 0.7,
                      "completeness": 0.5, "intent": 0.6, "num_groundings": 2.0, "decode_failures": 0.0}
    consistency = judge.asked(qi_judge.CONSISTENCY_RUBRIC)
    shown = {r["messages"][1]["content"][-1]["text"]: [frame_number(p["image_url"]["url"])
                                                      for p in r["messages"][1]["content"][:-1]] for r in consistency}
    # 0.0-1.0 s at 5 fps: frames 0..5, one a second but at least 2; 2.0-3.9 s: frames 10..19, 2 of them
    # (1.9 s of frames at 1 fps, rounded down to an even count).
    assert shown == {qi_judge.CONSISTENCY_PROMPT.format(caption="a door opens"): [0, 5],
                     qi_judge.CONSISTENCY_PROMPT.format(caption="a dog barks"): [10, 19]}
    (complete,) = judge.asked(qi_judge.COMPLETENESS_RUBRIC)
    assert [frame_number(p["image_url"]["url"]) for p in complete["messages"][1]["content"][:-1]] == [0, 5, 10, 19]
    assert complete["messages"][1]["content"][-1]["text"] == qi_judge.COMPLETENESS_PROMPT.format(
        question="Which door opens?", ground_truth="the blue door")
    (answer,) = judge.asked(qi_judge.ANSWER_RUBRIC)
    assert answer["messages"][1]["content"] == [{"type": "text", "text": qi_judge.ANSWER_PROMPT.format(
        question="Which door opens?", ground_truth="the blue door", answer="a red door")}]
    for request in judge.requests:  # greedy, 256 tokens, the judge's own name, as verl-omni asks
        assert (request["temperature"], request["top_p"], request["max_tokens"]) == (0.0, 1.0, 256)
        assert request["model"] == "judges/qwen3-vl"


def test_a_span_past_the_clip_scores_zero_and_is_counted_and_completeness_is_not_asked(
    judge: RubricJudge, clip: Path,
) -> None:
    judge.answers = {qi_judge.CONSISTENCY_RUBRIC: '{"score": 0.9}'}
    text = response([("0.0", "2.0", "a door opens"), ("5.0", "6.0", "nothing")], answer="B")
    result = score(judge, text, "B. The blue door", multiple_choice=True, video=clip)
    assert result["consistency"] == pytest.approx(0.45) and result["completeness"] == 0.0
    assert result["decode_failures"] == 1.0 and result["score"] == pytest.approx(1.0 + 1.0 + 0.5 * 0.45)
    assert len(judge.asked(qi_judge.CONSISTENCY_RUBRIC)) == 1 and not judge.asked(qi_judge.COMPLETENESS_RUBRIC)


def test_no_judge_is_asked_where_the_rules_decide(judge: RubricJudge) -> None:
    assert score(judge, "<answer>B</answer>", "B", multiple_choice=True)["score"] == 1.0
    exact = score(judge, "<answer>The Blue door!</answer>", "the blue door")  # an exact open answer
    assert exact["answer"] == 1.0 and exact["score"] == 1.0
    assert judge.requests == []


@pytest.mark.parametrize("answer", ["7 out of 10", '{"reason": "no score"}', ""])
def test_an_unreadable_judge_answer_is_an_error_not_a_zero(judge: RubricJudge, answer: str) -> None:
    judge.answers = {qi_judge.ANSWER_RUBRIC: answer}
    with pytest.raises(JudgeAnswerError):
        score(judge, "<answer>red</answer>", "blue")


def test_a_missing_video_is_an_error_and_no_judge_at_all_is_named(judge: RubricJudge, tmp_path: Path) -> None:
    text = response([("0.0", "1.0", "a door opens")], answer="B")
    with pytest.raises(FileNotFoundError, match="extra_info.video_path"):
        score(judge, text, "B", multiple_choice=True, video=tmp_path / "gone.mp4")
    with pytest.raises(JudgeError, match="enable reward.reward_model"):
        asyncio.run(qi_judge.compute_score("omnivideo_r1_qi", "<answer>red</answer>", "blue", {}))


def test_verl_omnis_environment_and_the_reward_kwargs_name_the_judge(
    judge: RubricJudge, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMNIVIDEO_QI_JUDGE_URL", f"http://{judge.address}/v1")
    monkeypatch.setenv("OMNIVIDEO_QI_JUDGE_MODEL", "env-judge")
    asyncio.run(qi_judge.compute_score("omnivideo_r1_qi", "<answer>red</answer>", "blue", {},
                                       reward_router_address="127.0.0.1:9"))  # the variable wins, as there
    assert judge.requests[-1]["model"] == "env-judge"
    score(judge, "<answer>red</answer>", "blue", judge_model="kwarg-judge")
    assert judge.requests[-1]["model"] == "kwarg-judge"
    settings = qi_judge.judge_settings(None, None, {"judge_url": "h:1", "max_frames_per_segment": 4})
    assert (settings.address, settings.model, settings.max_frames_per_segment) == ("h:1", "env-judge", 4)


def test_at_most_max_frames_per_segment_and_max_completeness_frames_are_shown(judge: RubricJudge, clip: Path) -> None:
    text = response([("0.0", "1.9", "a"), ("2.0", "3.9", "b")], answer="B")
    score(judge, text, "B", multiple_choice=True, video=clip, max_frames_per_segment=5, max_completeness_frames=3)
    per_pair = [len(r["messages"][1]["content"]) - 1 for r in judge.asked(qi_judge.CONSISTENCY_RUBRIC)]
    assert per_pair == [2, 2]  # 1.9 s a span: 2 frames (5 is cut to an even 4, and 1 fps asks fewer)
    (complete,) = judge.asked(qi_judge.COMPLETENESS_RUBRIC)
    assert [frame_number(p["image_url"]["url"]) for p in complete["messages"][1]["content"][:-1]] == [0, 10, 19]


def test_span_frames_decode_the_chosen_frames_at_the_judges_size(clip: Path) -> None:
    frames = span_frames(str(clip), 0.0, 3.9, max_frames=8)
    images = [Image.open(io.BytesIO(frame)) for frame in frames]
    assert [round(float(np.asarray(image).mean()) / LEVEL) for image in images] == [0, 6, 13, 19]
    assert {image.size[::-1] for image in images} == {frame_size(40, 56)}
    with pytest.raises(SpanError, match="holds no two frames"):
        span_frames(str(clip), 3.9, 9.0)


def test_the_span_arithmetic_is_qwen_vl_utils_own_on_a_generated_corpus() -> None:
    """calculate_video_frame_range, smart_nframes (fps 1, 2 to max_frames frames), the linspace
    of indices and smart_resize, for random clips, spans, frame rates and sizes."""
    vision = pytest.importorskip("qwen_vl_utils.vision_process")
    import torch

    rng = random.Random(0)
    checked = refused = 0
    for _ in range(3000):
        video_fps = rng.choice([1.0, 4.0, 5.0, 12.5, 23.976, 25.0, 29.97, 30.0, 60.0])
        total = rng.randint(1, 900)
        start = round(rng.uniform(-1, total / video_fps + 2), 1)
        end = round(start + rng.uniform(-0.5, 20), 1)
        max_frames = rng.randint(2, 16)
        element = {"video_start": start, "video_end": end, "fps": 1.0, "min_frames": 2,
                   "max_frames": max(2, max_frames - max_frames % 2)}
        try:
            first, last, count = vision.calculate_video_frame_range(element, total, video_fps)
            nframes = vision.smart_nframes(element, total_frames=count, video_fps=video_fps)
        except ValueError:
            with pytest.raises(SpanError):
                ours = span_frame_range(start, end, total, video_fps)
                span_frame_count(ours[1] - ours[0] + 1, video_fps, max_frames=element["max_frames"])
            refused += 1
            continue
        assert span_frame_range(start, end, total, video_fps) == (first, last)
        assert span_frame_count(count, video_fps, max_frames=element["max_frames"]) == nframes
        reference = torch.linspace(first, last, nframes).round().long().tolist()
        from omni_rewards.video_spans import frame_indices

        assert frame_indices(first, last, nframes) == reference
        checked += 1
    assert checked > 1500 and refused > 100
    for _ in range(2000):
        height, width = rng.randint(8, 4000), rng.randint(8, 4000)
        if max(height, width) / min(height, width) > 150:
            continue
        assert frame_size(height, width) == vision.smart_resize(
            height, width, factor=28, min_pixels=128 * 28 * 28, max_pixels=768 * 28 * 28)
