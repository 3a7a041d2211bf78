"""``reward.max_error_rate`` on the local engine, end to end: a scorer that breaks mid-run
stops the run with one message, after keeping the steps trained so far."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from omni_trainer.cli import main


@pytest.mark.slow
def test_a_scorer_that_breaks_stops_the_run_and_keeps_the_trained_steps(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before, every later step trained on zeros (GRPO: no signal, the KL term alone moving
    the policy) and the run reported success."""
    monkeypatch.setenv("OMNI_RL_CACHE", str(tmp_path_factory.getbasetemp() / "omni-rl-cache"))  # the session's
    calls = tmp_path / "calls"
    scorer = tmp_path / "scorer.py"
    scorer.write_text(textwrap.dedent(f"""
        def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
            with open({str(calls)!r}, "a") as log:  # one worker: calls come one at a time
                log.write("call\\n")
            with open({str(calls)!r}) as log:
                if sum(1 for _ in log) > 4:  # step 1's four samples score; then the service is down
                    raise ConnectionError("the grading service is down")
            return 1.0
    """))
    run = tmp_path / "run"
    code = main([
        "data.builtin_task_size=8", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "data.max_response_length=2", "reward.num_workers=1",
        "trainer.total_training_steps=3", "trainer.save_freq=-1", "trainer.val_before_train=false",
        f"reward.custom_reward_function.path={scorer}", f"trainer.default_local_dir={run}",
    ])
    error = capsys.readouterr().err
    assert code == 2, error
    assert "step 2: the reward scorer failed (error or timeout) on 4 of 4 samples (100%)" in error
    assert "ConnectionError: the grading service is down" in error and "reward.max_error_rate=0.5" in error
    rows = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows == [1.0]  # step 2 was never trained on
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000001"]  # kept for the resume
