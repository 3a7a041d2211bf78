"""The engine wrapper's batching and regrouping, against a stand-in for ``vllm_omni.Omni``.

The real engine call runs in tests/gpu/test_vllm_omni_rollout.py; here only the logic
around it: n samples per prompt, seeded rounds, request-id regrouping, missing outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from omni_contracts import RolloutAdapter, StageConfig
from omni_rollout.vllm_omni.deploy_config import DeployOptions
from omni_rollout.vllm_omni.devices import ReplicaLayout
from omni_rollout.vllm_omni.engine import (
    EngineNotStartedError,
    EngineRequest,
    PolicySampling,
    VllmOmniEngine,
)


class TextAdapter(RolloutAdapter):
    modes = ("text",)

    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        return (StageConfig(0, "FakeLM", "text", final_output=True),)

    def rollout_flags(self, mode: str) -> dict[int, dict[str, object]]:
        return {}

    def get_pipeline_id(self, mode: str) -> str:
        return "fake"


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: None = None
    finish_reason: str = "stop"


@dataclass
class Output:
    request_id: str
    outputs: list[Completion]
    stage_id: int = 0
    finished: bool = True


@dataclass
class FakeOmni:
    """Answers each prompt with [first prompt id, seed]; drops the prompt whose first id is 0."""

    default_sampling_params_list: list[Any] = field(default_factory=lambda: ["default"])
    calls: list[tuple[list[dict[str, Any]], list[Any]]] = field(default_factory=list)

    def generate(self, prompts: list[dict[str, Any]], params: list[Any], use_tqdm: bool) -> list[Output]:
        self.calls.append((prompts, params))
        seed = params[0]["seed"]
        answered = [
            Output(f"{i}_uuid", [Completion([p["prompt_token_ids"][0], seed or 0])])
            for i, p in enumerate(prompts)
            if p["prompt_token_ids"][0] != 0
        ]
        return list(reversed(answered))  # completion order differs from submission order


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> VllmOmniEngine:
    monkeypatch.setattr(PolicySampling, "to_vllm", lambda self, offset=0: {
        "seed": None if self.seed is None else self.seed + offset})
    engine = VllmOmniEngine("unused", TextAdapter(), "text", layout=ReplicaLayout(),
                            options=DeployOptions(), work_dir=tmp_path)
    engine._omni = FakeOmni()
    return engine


def test_generate_before_start_says_what_to_do(tmp_path: Any) -> None:
    engine = VllmOmniEngine("m", TextAdapter(), "text", layout=ReplicaLayout(),
                            options=DeployOptions(), work_dir=tmp_path)
    with pytest.raises(EngineNotStartedError, match="start"):
        engine.generate([EngineRequest([1])], PolicySampling())


def test_seeded_sampling_runs_one_round_per_sample_with_distinct_seeds(engine: VllmOmniEngine) -> None:
    results = engine.generate([EngineRequest([5]), EngineRequest([6])], PolicySampling(n=3, seed=10))
    # 3 rounds of 2 prompts; each sample carries [prompt id, seed of its round].
    assert [[r.sample.response_ids for r in per] for per in results] == [
        [(5, 10), (5, 11), (5, 12)],
        [(6, 10), (6, 11), (6, 12)],
    ]
    assert len(engine._omni.calls) == 3


def test_unseeded_sampling_sends_n_copies_in_one_batch(engine: VllmOmniEngine) -> None:
    results = engine.generate([EngineRequest([5]), EngineRequest([6])], PolicySampling(n=2))
    assert len(engine._omni.calls) == 1 and len(engine._omni.calls[0][0]) == 4
    assert [len(per) for per in results] == [2, 2]
    assert results[1][0].sample.response_ids == (6, 0)


def test_request_without_output_becomes_an_abort(engine: VllmOmniEngine) -> None:
    (only,) = engine.generate([EngineRequest([0, 3])], PolicySampling())
    assert only[0].aborted and only[0].sample.response_ids == ()


def test_no_requests_make_no_engine_call(engine: VllmOmniEngine) -> None:
    assert engine.generate([], PolicySampling()) == []
    assert engine._omni.calls == []
