"""A judge model as the reward on the local engine (``reward.reward_model``), end to end: the
judge is served in-process behind an OpenAI-compatible chat endpoint, and a reward function
written as verl-omni writes its judged rewards (``engines/judged_reward.py``, which verl's judged
run loads too) runs unchanged. The tiny judge is a random chat model: what it answers is read,
and an answer without a score is a counted failure that stops the run, never a 0 trained on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omni_trainer.cli import main

JUDGED_REWARD = Path(__file__).resolve().parents[1] / "judged_reward.py"  # verl's judged run loads it too


def judged_run(tmp_path: Path, *extra: str) -> list[str]:
    from omni_model_kit.tiny import build_tiny_chat_lm

    return [
        "data.builtin_task_size=8", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "data.max_response_length=4", "reward.num_workers=1",
        "trainer.total_training_steps=2", "trainer.save_freq=-1", "trainer.val_before_train=false",
        f"reward.custom_reward_function.path={JUDGED_REWARD}", "reward.reward_model.enable=true",
        f"reward.reward_model.model_path={build_tiny_chat_lm()}", "reward.reward_model.rollout.response_length=8",
        "reward.reward_model.rollout.do_sample=false", f"trainer.default_local_dir={tmp_path / 'run'}", *extra,
    ]


@pytest.mark.slow
def test_the_judge_answers_the_reward_function_on_every_sample(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OMNI_RL_CACHE", str(tmp_path_factory.getbasetemp() / "omni-rl-cache"))  # the session's
    assert main(judged_run(tmp_path)) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "reward: the judge " in out and "/v1/chat/completions (cpu, float32)" in out
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1.0, 2.0]
    for row in rows:  # every sample's judge answered (8 tokens of a random model: never empty)
        assert row["reward/errors"] == 0 and row["reward/timeouts"] == 0
        judged = [value for key, value in row.items() if key.endswith("/judge_chars/mean")]
        assert judged and all(value > 0 for value in judged), row


@pytest.mark.slow
def test_a_judge_answer_without_a_score_is_a_counted_failure_that_stops_the_run(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OMNI_RL_CACHE", str(tmp_path_factory.getbasetemp() / "omni-rl-cache"))
    code = main(judged_run(tmp_path, "+reward.custom_reward_function.reward_kwargs.strict=true"))
    error = capsys.readouterr().err
    assert code == 2, error
    assert "step 1: the reward scorer failed (error or timeout) on 4 of 4 samples (100%)" in error
    assert "ValueError: no score in the judge's answer" in error
    assert not (tmp_path / "run" / "metrics.jsonl").exists() or not (tmp_path / "run" / "metrics.jsonl").read_text()


@pytest.mark.slow
def test_a_judged_run_learns_as_the_rule_scored_run_does(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The embedded default twice, 20 steps: paid by the built-in rule, and by the built-in judge
    (``trainer tiny-judge``: the tiny chat model taught the rule) through
    ``omni_rewards.scorers.builtin_digits.compute_score_judged``. Every judged sample is answered,
    the judged reward rises as the rule's does, and the two curves are the same run wherever the
    judge agreed with the rule on every sample of the steps so far (the run is deterministic)."""
    monkeypatch.setenv("OMNI_RL_CACHE", str(tmp_path_factory.getbasetemp() / "omni-rl-cache"))
    from omni_trainer.builtin_files import builtin_judge

    steps = ["trainer.total_training_steps=20", "trainer.save_freq=-1", "trainer.test_freq=0",
             "trainer.val_before_train=false"]
    assert main([*steps, f"trainer.default_local_dir={tmp_path / 'rule'}"]) == 0
    judged = [*steps, f"trainer.default_local_dir={tmp_path / 'judged'}", "reward.reward_model.enable=true",
              f"reward.reward_model.model_path={builtin_judge()}", "reward.num_workers=4",
              "reward.custom_reward_function.path=pkg://omni_rewards.scorers.builtin_digits",
              "reward.custom_reward_function.name=compute_score_judged"]
    assert main(judged) == 0, capsys.readouterr().err
    rule, judge = ([json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
                   for name in ("rule", "judged"))
    assert len(rule) == len(judge) == 20
    assert all(row["reward/errors"] == 0 and row["reward/timeouts"] == 0 for row in judge)
    agrees = [row["reward/omni_rl/builtin_digits/rule_agrees/mean"] for row in judge]
    assert sum(agrees) / len(agrees) >= 0.98, agrees
    curve = [row["reward/score/mean"] for row in judge]
    assert sum(curve[:5]) / 5 < 0.1 and sum(curve[-3:]) / 3 > 0.9, curve  # it learns
    same = next((i for i, agreed in enumerate(agrees) if agreed < 1.0), len(agrees))
    assert same > 0 and curve[:same] == [row["reward/score/mean"] for row in rule[:same]]
    assert max(abs(a - row["reward/score/mean"]) for a, row in zip(curve, rule, strict=True)) < 0.05


@pytest.mark.slow
def test_a_judge_that_hangs_is_a_counted_timeout_that_stops_the_run(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """OmniVideo-R1 QI's judged reward asking a judge of the user's own (``judge_url``) that takes
    every request and never answers: each sample runs into ``reward.timeout_s``, is counted as a
    timeout, and the step stops before its update."""
    import socket

    monkeypatch.setenv("OMNI_RL_CACHE", str(tmp_path_factory.getbasetemp() / "omni-rl-cache"))
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts; nobody ever answers
        address = "127.0.0.1:%d" % silent.getsockname()[1]
        code = main([
            "data.builtin_task_size=8", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "data.max_response_length=4", "reward.num_workers=1",
            "trainer.total_training_steps=2", "trainer.save_freq=-1", "trainer.val_before_train=false",
            "reward.timeout_s=2", "reward.custom_reward_function.path=pkg://omni_rewards.scorers.omnivideo_qi_judge",
            "reward.custom_reward_function.name=compute_score",
            f"+reward.custom_reward_function.reward_kwargs.judge_url={address}",
            f"trainer.default_local_dir={tmp_path / 'run'}"])
    error = capsys.readouterr().err
    assert code == 2, error
    assert "step 1: the reward scorer failed (error or timeout) on 4 of 4 samples (100%)" in error
    assert error.count("timeout, scored 0: timed out after 2 s") == 4, error  # each sample named a timeout
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert not metrics.exists() or not metrics.read_text()
