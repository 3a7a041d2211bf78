"""The verl engine's side of resuming (verl's resume_mode/resume_from_path, the settings
check) and of ``reward.max_error_rate`` (our workers tally, our replay buffer stops the run).
Nothing here launches verl; it needs verl's installed code (the distributed extra)."""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from omni_trainer.config import ConfigError, load_config
from omni_trainer.resume_check import data_fingerprint, record_run
from omni_training.run_guards import RewardFailureError, StepFailureWatch, StepTally, count_sample

if importlib.util.find_spec("verl") is None:  # pragma: no cover
    pytest.skip("needs the distributed extra (uv sync --extra distributed)", allow_module_level=True)

from omni_trainer.engines.verl.launch import record_start, resumed_step  # noqa: E402
sys.path.insert(0, str(Path(__file__).parent))
from test_verl_checkpoints import save_step  # noqa: E402
from omni_verl.settings import SETTINGS_ENV, VerlSettings  # noqa: E402
from omni_trainer.engines.verl.translate import config_problems, settings_for, to_verl_config  # noqa: E402


def verl_run(tmp_path: Path, *extra: str) -> list[str]:
    train = tmp_path / "train.parquet"
    if not train.exists():
        train.write_bytes(b"rows")
    return ["trainer.engine=verl", "actor_rollout_ref.model.path=/models/m", f"data.train_files={train}",
            "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
            f"trainer.default_local_dir={tmp_path / 'run'}", *extra]


def test_resume_path_reaches_verl_absolute_and_a_folder_verl_cannot_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    resume = ["trainer.resume_mode=resume_path", "trainer.resume_from_path=runs/a/global_step_40"]
    verl = to_verl_config(load_config(verl_run(tmp_path, *resume)), lora_target_modules=None, lora_exclude_modules=None)
    # verl's task runner resolves a relative path from its own directory: it gets ours, absolute.
    assert verl.trainer.resume_mode == "resume_path"
    assert verl.trainer.resume_from_path == str(tmp_path / "runs" / "a" / "global_step_40")
    local_layout = load_config(verl_run(tmp_path, "trainer.resume_mode=resume_path",
                                        "trainer.resume_from_path=runs/a/checkpoints/step_000040"))
    # verl asserts "global_step_" in the path and reads the step from it: refused before launch.
    assert any("verl resumes from a global_step_<N> folder" in p for p in config_problems(local_layout))
    settings = settings_for(load_config(verl_run(tmp_path, "reward.max_error_rate=0.25")), "/models/m")
    assert settings.reward_max_error_rate == 0.25  # our agent-loop manager reads it


def test_the_step_verl_resumes_and_the_run_it_belongs_to(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    assert resumed_step(load_config(verl_run(tmp_path)), run) is None  # nothing saved yet
    (run / "latest_checkpointed_iteration.txt").write_text("6")
    assert resumed_step(load_config(verl_run(tmp_path)), run) == (6, run)
    assert resumed_step(load_config(verl_run(tmp_path, "trainer.resume_mode=disable")), run) is None
    other = tmp_path / "other" / "global_step_12"
    resume = ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={other}"]
    assert resumed_step(load_config(verl_run(tmp_path, *resume)), run) == (12, other.parent)


def test_a_verl_run_resumed_with_other_settings_is_refused_and_its_config_kept(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    first = load_config(verl_run(tmp_path))
    record_run(run, first, data_fingerprint(first), step=0)
    saved = (run / "config.yaml").read_text()
    save_step(run, 6)  # verl's files of step 6, and its tracker
    with pytest.raises(ConfigError, match=r"at step 6 .*\n.*actor_rollout_ref.actor.optim.lr: 3e-06 -> 1e-05"):
        record_start(load_config(verl_run(tmp_path, "actor_rollout_ref.actor.optim.lr=1e-5")), run)
    assert (run / "config.yaml").read_text() == saved
    assert record_start(load_config(verl_run(tmp_path, "trainer.total_training_steps=50")), run) == 6
    assert (run / "config.before_step_6.yaml").read_text() == saved


def test_the_watch_stops_a_step_whose_scorer_failed_on_most_samples() -> None:
    """verl scores in several agent-loop workers: their tallies add up per step."""
    ok, error, timeout = ({"reward_ok": 1.0, "reward_error": 0.0, "reward_timeout": 0.0},
                          {"reward_ok": 0.0, "reward_error": 1.0, "reward_timeout": 0.0},
                          {"reward_ok": 0.0, "reward_error": 0.0, "reward_timeout": 1.0})
    one: dict[int, StepTally] = {}
    two: dict[int, StepTally] = {}
    for info in (ok, error):
        count_sample(one, 1, info)
    for info in (ok, ok, error, timeout):
        count_sample(two, 2, info)
    count_sample(two, 1, {"score": 0.0})  # not scored by omni-rewards (no reward_ok): not counted
    watch = StepFailureWatch(samples_per_step=4, max_error_rate=0.5)
    watch.add(one)
    watch.add(two)
    watch.check()  # step 1: 1 failed of 2 so far, 2 to come: undecided; step 2: 2 of 4, not more than half
    watch.add({1: StepTally(failed=0, total=2)})
    watch.check()  # step 1 complete, 1 of 4
    assert watch.tallies == {}
    assert watch.take_metrics(2) == {"reward/errors": 1.0, "reward/timeouts": 1.0}  # named in the step line
    assert watch.take_metrics(2) == {}  # reported once
    three: dict[int, StepTally] = {}
    for reason in ("HTTPError: HTTP Error 500", "JudgeTimeoutError: no answer within 30 s", ""):
        count_sample(three, 3, {**timeout, "reward_reason": reason}, "digits")
    watch.add(three)  # 3 of 4 failed before the last sample is in
    with pytest.raises(RewardFailureError, match=r"step 3: .* on 3 of 4 samples \(75%\)") as stopped:
        watch.check(run_dir="/runs/x")
    assert ("First failures:\n    digits: HTTPError: HTTP Error 500\n    digits: JudgeTimeoutError: no answer within 30 s\n"
            in str(stopped.value))


def test_a_steps_scorer_fields_are_averaged_per_data_source_as_the_local_engine_logs_them() -> None:
    """verl logs a training step's score only; what the scorers returned besides (a judge's
    agreement with a rule, an answer's length; ours travel as one JSON field, ``reward_fields``)
    is averaged per data source from the tallies."""
    import numpy as np

    status = {"reward_ok": 1.0, "reward_error": 0.0, "reward_timeout": 0.0, "reward_skipped": 0.0}
    tallies: dict[int, StepTally] = {}
    count_sample(tallies, 1, {**status, "score": 1.0, "agrees": np.float32(1.0), "reason": "ok"}, "digits")
    count_sample(tallies, 1, {**status, "score": 0.0, "agrees": 0.0, "source_truncated": False}, "digits")
    count_sample(tallies, 1, {**status, "score": 0.5, "chars": float("nan")}, "math")
    count_sample(tallies, 1, {**status, "score": 0.0, "reward_fields": '{"agrees": 1.0, "judge": "said so"}'}, "digits")
    watch = StepFailureWatch(samples_per_step=4, max_error_rate=0.5)
    watch.add(tallies)
    watch.check()
    assert watch.take_metrics(1) == {"reward/errors": 0.0, "reward/timeouts": 0.0, "reward/digits/score/mean": 1 / 3,
                                     "reward/digits/agrees/mean": 2 / 3, "reward/math/score/mean": 0.5}


def test_a_step_with_no_sample_left_to_train_stops_with_its_cause() -> None:
    """Every talker sample of a step masked (each thinker answer cut at its length limit):
    verl would stop on an empty response mask; the watch names the cause and the way out.
    One trainable sample is enough to go on."""
    from omni_training.run_guards import NothingToTrainError

    cut = {"reward_ok": 1.0, "reward_error": 0.0, "reward_timeout": 0.0, "source_truncated": True}
    spoken = {**cut, "source_truncated": False}
    tallies: dict[int, StepTally] = {}
    for info in (cut, cut, cut, spoken):
        count_sample(tallies, 1, info)
    for info in (cut, cut, cut):
        count_sample(tallies, 2, info)
    assert (tallies[1].masked, tallies[2].masked) == (3, 3)
    watch = StepFailureWatch(samples_per_step=4, max_error_rate=0.5)
    watch.add(tallies)
    watch.check()  # step 2 is not complete yet
    last: dict[int, StepTally] = {}
    count_sample(last, 2, cut)  # from another worker
    watch.add(last)
    with pytest.raises(NothingToTrainError, match=r"step 2: all 4 speech samples .* cut at its length limit"):
        watch.check()
    assert 1 not in watch.tallies  # step 1 passed: one sample trains


def test_our_workers_tally_training_samples_and_the_step_stops_before_its_update(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check runs when verl's trainer samples a step's batch from our replay buffer: that
    step (the last one too) is never trained on; before, it ran when the next step was
    dispatched, after an update on the failed step's zeros."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.utils.import_utils import load_extern_object

    from omni_verl import agent_loop

    worker: Any = object.__new__(agent_loop.OmniAgentLoopWorkerTQ)  # the tally needs none of verl's set-up
    failed = SimpleNamespace(extra_fields={"reward_extra_info": {"reward_ok": 0.0, "reward_error": 1.0}})
    for step, validate in ((5, False), (5, False), (5, True)):
        worker.after_postprocess([failed], validate, {"global_steps": step})
    assert worker.take_reward_tallies() == {5: StepTally(failed=2, total=2, errors=2)}  # validation not counted
    assert worker.take_reward_tallies() == {}

    class Handle:
        class take_reward_tallies:  # noqa: N801  (stands in for a Ray actor method)
            @staticmethod
            def remote() -> dict[int, StepTally]:
                return {5: StepTally(failed=2, total=2)}

    monkeypatch.setattr(agent_loop.ray, "get", lambda refs: refs)  # the handles answer at once
    monkeypatch.setenv(SETTINGS_ENV, VerlSettings(model_path="/m", reward_max_error_rate=0.5).to_env())
    manager: Any = object.__new__(agent_loop.OmniAgentLoopManager)
    manager.config = SimpleNamespace(data=SimpleNamespace(train_batch_size=1),
                                     actor_rollout_ref=SimpleNamespace(rollout=SimpleNamespace(n=2)),
                                     trainer=SimpleNamespace(default_local_dir="runs/x"))
    manager.agent_loop_workers, manager.reward_watch = [Handle()], None
    monkeypatch.setattr(agent_loop.OmniAgentLoopManager, "running", manager)
    monkeypatch.setattr(ReplayBuffer, "sample", lambda self, global_steps, partition_id, batch_size: ("batch", {}))

    # verl's trainer builds the replay buffer the translated config names.
    verl = to_verl_config(load_config(["trainer.engine=verl", "actor_rollout_ref.model.path=/m", "data.train_files=[/d.parquet]",
                                       "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe"]),
                          lora_target_modules=None, lora_exclude_modules=None)
    sampler = verl.trainer.v1.sampler.custom_sampler
    buffer: Any = object.__new__(load_extern_object(sampler.path, sampler.name))
    assert isinstance(buffer, agent_loop.RewardCheckedReplayBuffer)
    assert buffer.sample(5, "val", 2) == ("batch", {})  # validation batches are not checked
    with pytest.raises(RewardFailureError, match="step 5: .* on 2 of 2 samples"):
        buffer.sample(5, "train", 2)


def test_verls_sync_trainer_samples_the_step_before_updating_and_after_every_session_settled() -> None:
    """Canary for :class:`RewardCheckedReplayBuffer`: verl builds the replay buffer from
    ``trainer.v1.sampler.custom_sampler``, samples a step's batch before computing anything
    on it, and marks a prompt finished only after all its sessions (our tally included) ran."""
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    build = inspect.getsource(PPOTrainer._build_replay_buffer)
    assert "custom_sampler" in build and "load_extern_type(custom_sampler.path, custom_sampler.name)" in build
    step = inspect.getsource(PPOTrainer._step_once)
    assert step.index("self.replay_buffer.sample(") < step.index("self._compute_old_log_prob(") < step.index(
        "self._update_actor(")
    assert "metrics.update(off_policy_metrics)" in step  # the sample's metrics (our reward/* ones) are the step's
    run_prompt = inspect.getsource(AgentLoopWorkerTQ._run_prompt)
    assert run_prompt.index("await _settle_session_tasks(tasks)") < run_prompt.index('tag={"status": status}')


def test_verls_postprocessing_still_scores_before_our_hook_sees_the_trajectory() -> None:
    """Canary for ``compat.AfterPostprocess``: verl's V1 worker scores the trajectory (and sets
    ``reward_extra_info``) inside ``_agent_loop_postprocess(output, validate, **kwargs)``, whose
    kwargs carry ``global_steps``."""
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    from omni_verl.compat import AfterPostprocess, ray_actor_class

    method = vars(ray_actor_class(AgentLoopWorkerTQ))["_agent_loop_postprocess"]
    parameters = [name for name in inspect.signature(method).parameters if name != "_ray_trace_ctx"]  # Ray's tracing
    assert parameters == ["self", "output", "validate", "kwargs"]
    source = inspect.getsource(method)
    assert "await self._compute_score(outputs" in source and 'kwargs["global_steps"]' in source

    seen: list[Any] = []

    class Base:
        async def _agent_loop_postprocess(self, output: Any, validate: bool, **kwargs: Any) -> None:
            seen.append("scored")

    class Worker(AfterPostprocess, Base):
        def after_postprocess(self, outputs: list[Any], validate: bool, sample: dict[str, Any]) -> None:
            seen.append((outputs, validate, sample))

    import asyncio

    asyncio.run(Worker()._agent_loop_postprocess("out", False, global_steps=3))
    assert seen == ["scored", (["out"], False, {"global_steps": 3})]


def test_a_failure_raised_in_verls_task_runner_reaches_the_cli_as_its_message() -> None:
    from ray.exceptions import RayTaskError

    from omni_trainer.engines.verl.launch import unwrap_reward_failure

    cause = RewardFailureError("step 3: the reward scorer failed")
    wrapped = RayTaskError("TaskRunner.run", "Traceback (most recent call last): ...", cause).as_instanceof_cause()
    assert str(unwrap_reward_failure(wrapped)) == "step 3: the reward scorer failed"
    assert unwrap_reward_failure(RayTaskError("f", "tb", ValueError("other"))) is None
    assert json.loads(VerlSettings(model_path="/m").to_env())["reward_max_error_rate"] == 0.5
