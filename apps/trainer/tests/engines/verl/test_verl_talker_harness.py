"""A talker run through verl's own code on CPU, against the local engine.

``verl_talker_harness.py`` (a subprocess: verl picks its device platform once per process)
serves text rows through our rollout server in mode ``talker`` (verl's ``generate`` on the
vLLM-Omni driver, over a recording ``AsyncOmni`` answering as vLLM-Omni 0.28 does, with the
tiny model's own talker samples), verl's agent-loop worker with our speech agent loop and its
postprocessing (the speech reward scored in the loop), and verl's FSDP2 engine forward. What
stays GPU-only: vLLM-Omni itself, Ray, verl's TransferQueue transport.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed --extra gpu)")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_verl_cpu_harness import run_harness  # noqa: E402

pytestmark = pytest.mark.slow

HARNESS = Path(__file__).with_name("verl_talker_harness.py")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_harness(tmp_path_factory.mktemp("verl-talker"), harness=HARNESS)


def test_verl_trains_the_talker_with_our_classes(report: dict[str, Any]) -> None:
    assert report["engine_class"] == "OmniFSDPEngine"
    assert report["module_class"].endswith("Qwen3OmniTalkerPolicy")  # verl's FSDP2 wrapper of it
    assert report["agent_loop"] == "omni_speech_agent"


def test_a_weight_sync_sends_the_talker_only(report: dict[str, Any]) -> None:
    """verl's stream of the actor's weights, through our engine, holds the talker's parameters
    under the names vLLM-Omni's talker stage loads (``talker.*``): not the frozen thinker and
    code2wav the actor also holds (60 GB on the real checkpoint, thrown away by the stage)."""
    sent, verls = report["weight_sync"]["sent"], report["weight_sync"]["verl"]
    assert {name.split(".")[0] for name in verls} == {"thinker", "talker", "code2wav"}
    assert sent and all(name.startswith("talker.") for name in sent)
    assert sent == [name for name in verls if name.startswith("talker.")]  # every talker tensor, verl's order


def test_a_row_whose_thinker_was_cut_is_counted_and_never_trained(report: dict[str, Any]) -> None:
    """A thinker answer cut at its length limit reaches vLLM-Omni's talker one hidden-state row
    short of the source the row stores, so the actor's log-probs would be silently wrong: the
    row keeps its speech tokens (and reward) but trains none of them, and is counted."""
    (cut,) = report["cut_rows"]
    assert cut["tokens"] > 0 and cut["trained_tokens"] == 0
    assert cut["reward_extra_info"]["source_truncated"] == 1.0
    assert cut["verl_log_probs_finite"]  # verl's forward still runs on the masked row
    assert all(row["reward_extra_info"]["source_truncated"] == 0.0 for row in report["rows"])


def test_each_row_is_the_talkers_sample(report: dict[str, Any]) -> None:
    assert len(report["rows"]) == 3
    for row in report["rows"]:
        assert row["prompt_is_placeholder"]  # the talker's prefill length, not the thinker's prompt
        assert row["fields"] == ["qwen3_omni.residual_codes", "qwen3_omni.talker_source_ids"]
        assert row["source_is_thinker_sequence"]
        assert row["rollout_log_probs"] == pytest.approx(row["sampled_log_probs"], abs=1e-7)


def test_verls_forward_recomputes_the_sampled_log_probs(report: dict[str, Any]) -> None:
    """verl's FSDP2 forward, rebuilding the talker's conditioning from the stored thinker
    sequence, gives the log-probs the talker sampled with, as the local actor does from the
    conditioning the local engine stored (fp32, CPU)."""
    for row in report["rows"]:
        verl, sampled = row["verl_log_probs"], row["sampled_log_probs"]
        local = row["local_actor_log_probs"][: len(sampled)]
        assert len(verl) == len(sampled) == len(row["response"]) > 0
        assert max(abs(a - b) for a, b in zip(verl, sampled, strict=True)) < 1e-5
        assert max(abs(a - b) for a, b in zip(verl, local, strict=True)) < 1e-5
        assert all(math.isfinite(v) for v in verl)


def test_the_speech_reward_is_scored_in_the_agent_loop(report: dict[str, Any]) -> None:
    """The agent loop scores code2wav's waveform with ``reward.audio_rewards`` (duration and
    silence here) against the thinker's words: verl's batch carries it as ``rm_scores`` (so
    its text reward function never runs) with the per-reward values and statuses."""
    for row in report["rows"]:
        expected = row["expected_reward"]
        assert row["rm_score"] == pytest.approx(expected["score"], abs=1e-6)
        info = row["reward_extra_info"]
        assert info["audio_reward/duration"] == pytest.approx(expected["audio_reward/duration"], abs=1e-6)
        assert info["audio_reward/silence"] == pytest.approx(expected["audio_reward/silence"], abs=1e-6)
        assert (info["reward_ok"], info["reward_error"]) == (1.0, 0.0)
