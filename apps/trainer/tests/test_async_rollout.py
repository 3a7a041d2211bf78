"""Asynchronous rollout on the local engine: the staleness bound, per-sample policy versions,
weights reaching the rollout's copy, failures handed to the trainer, and a whole run."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path


import pytest
import torch

from omni_contracts import RolloutSample
from omni_trainer.engines.local.async_rollout import AsyncSampler
from omni_trainer.cli import main
from omni_trainer.prompts import Prepared
from omni_trainer.engines.local.step import Rollouts, Sampler, Scores


def prompt(step: int) -> Prepared:
    return Prepared(inputs={"input_ids": torch.tensor([[step, 1]])}, data_source="d", ground_truth="1", index=step)


class RecordingSampler(Sampler):
    """Samples one response per prompt, recording the copy's weight when it sampled."""

    def __init__(self, policy: torch.nn.Linear, fail_at: int | None = None, delay: float = 0.0) -> None:
        self.policy = policy
        self.fail_at = fail_at
        self.delay = delay
        self.weights_seen: dict[int, float] = {}

    def rollout(self, prompts: Sequence[Prepared], step: int) -> Rollouts:
        if step == self.fail_at:
            raise ValueError(f"the engine broke at step {step}")
        time.sleep(self.delay)
        self.weights_seen[step] = float(self.policy.weight.item())
        samples = [RolloutSample(prompt_ids=[1], response_ids=[5], response_mask=[1], response_logprobs=[-0.1]) for _ in prompts]
        return Rollouts(samples, list(prompts), ["g"] * len(prompts))

    def score(self, rollouts: Rollouts) -> Scores:
        return Scores(torch.ones(len(rollouts.samples)), torch.ones(len(rollouts.samples)), {})


def async_sampler(actor: torch.nn.Linear, background: RecordingSampler, k: int, first: int = 1, last: int = 8) -> AsyncSampler:
    return AsyncSampler(
        background, background.policy, lambda: dict(actor.named_parameters()), lambda step: [prompt(step)],
        first_step=first, last_step=last, max_staleness=k,
    )


@pytest.mark.parametrize("k", [1, 2])
def test_samples_lag_the_actor_by_at_most_k_versions_and_carry_the_weights_that_drew_them(k: int) -> None:
    actor, copy = torch.nn.Linear(1, 1, bias=False), torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        actor.weight.fill_(0.0)
        copy.weight.fill_(0.0)
    background = RecordingSampler(copy)
    sampler = async_sampler(actor, background, k)
    staleness = []
    try:
        for step in range(1, 9):
            sampler.rollout([prompt(step)], step)
            metrics = sampler.rollout_metrics()
            staleness.append(int(metrics["async/staleness"]))
            version = int(metrics["async/policy_version"])
            # The copy sampled with the weights of the version it reports: version v has weight v.
            assert background.weights_seen[step] == float(version)
            assert step - 1 - version == staleness[-1] <= k
            # An update: the thread runs ahead meanwhile, as far as the bound allows.
            deadline = time.monotonic() + 30
            while min(step + k, 8) not in background.weights_seen:
                assert time.monotonic() < deadline, "the thread did not sample ahead"
                time.sleep(0.005)
            assert step + k + 1 not in background.weights_seen  # and no further
            with torch.no_grad():
                actor.weight.fill_(float(step))
            sampler.publish(step)
    finally:
        sampler.close()
    assert max(staleness) == k  # the thread did run ahead as far as allowed
    assert sum(metrics[f"async/staleness_{s}"] for s in range(k + 1) if f"async/staleness_{s}" in metrics) == 8


def test_a_failing_rollout_reaches_the_trainer_at_the_step_it_waits_for() -> None:
    actor, copy = torch.nn.Linear(1, 1, bias=False), torch.nn.Linear(1, 1, bias=False)
    sampler = async_sampler(actor, RecordingSampler(copy, fail_at=2), k=1)
    try:
        sampler.rollout([prompt(1)], 1)
        sampler.publish(1)
        with pytest.raises(RuntimeError, match="the asynchronous rollout failed before step 2") as raised:
            sampler.rollout([prompt(2)], 2)
        assert "the engine broke at step 2" in str(raised.value.__cause__)
    finally:
        sampler.close()


def test_the_prompts_drawn_must_be_the_steps() -> None:
    actor, copy = torch.nn.Linear(1, 1, bias=False), torch.nn.Linear(1, 1, bias=False)
    sampler = async_sampler(actor, RecordingSampler(copy), k=1)
    try:
        with pytest.raises(RuntimeError, match="step 1: the asynchronous rollout sampled other prompts"):
            sampler.rollout([prompt(99)], 1)
    finally:
        sampler.close()


def test_validation_pauses_the_thread() -> None:
    actor, copy = torch.nn.Linear(1, 1, bias=False), torch.nn.Linear(1, 1, bias=False)
    background = RecordingSampler(copy, delay=0.05)
    sampler = async_sampler(actor, background, k=2)
    try:
        sampler.rollout([prompt(1)], 1)
        with sampler.paused():
            sampled = set(background.weights_seen)
            time.sleep(0.2)
            assert set(background.weights_seen) == sampled  # nothing sampled while paused
        assert isinstance(sampler.paused(), type(threading.Lock()))
    finally:
        sampler.close()


def test_a_run_with_one_step_of_staleness(tmp_path: Path) -> None:
    """The embedded default with async_training.max_staleness=1 and token TIS in bypass mode:
    from step 2 on every step trains on samples one version old, the old log-probs are the
    rollout's (the weights compare the actor with the policy that sampled: a KL once the
    weights move), and a resumed run continues."""
    run = tmp_path / "run"
    common = [f"trainer.default_local_dir={run}", "trainer.test_freq=0", "trainer.save_freq=2",
              "async_training.max_staleness=1", "algorithm.rollout_correction.bypass_mode=true",
              "algorithm.rollout_correction.rollout_is=token"]
    assert main([*common, "trainer.total_training_steps=4"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][1:]
    assert [row["step"] for row in rows] == [1.0, 2.0, 3.0, 4.0]
    assert [row["async/staleness"] for row in rows] == [0.0, 1.0, 1.0, 1.0]
    assert [row["async/policy_version"] for row in rows] == [0.0, 0.0, 1.0, 2.0]
    assert rows[-1]["async/staleness_0"] == 1 and rows[-1]["async/staleness_1"] == 3
    assert all(row["timing_s/wait_rollout"] >= 0 and "rollout_corr/rollout_is_mean" in row for row in rows)
    assert main([*common, "trainer.total_training_steps=5"]) == 0  # resumes from step 4's checkpoint
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][1:]
    assert [row["step"] for row in rows] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert rows[-1]["async/staleness"] == 0.0 and rows[-1]["async/policy_version"] == 4.0  # the restart's first batch


@pytest.mark.parametrize(("overrides", "message"), [
    (["async_training.max_staleness=1"], "set algorithm.rollout_correction.bypass_mode=true"),
    (["async_training.max_staleness=-1"], "async_training.max_staleness=-1 must be >= 0"),
    (["async_training.max_staleness=1", "algorithm.rollout_correction.bypass_mode=true", "distillation.enabled=true",
      "distillation.teacher_models.teacher_model.model_path=/t"],
     "asynchronous rollout runs RL on text in this version (this run is distillation)"),
])
def test_asynchronous_rollout_is_checked_before_anything_loads(overrides: list[str], message: str) -> None:
    from omni_trainer.config import load_config
    from omni_trainer.findings import Findings
    from omni_trainer.preflight import _async_training
    from omni_trainer.resolved import resolve_run

    found = Findings()
    _async_training(resolve_run(load_config(overrides)), found)
    assert any(message in problem for problem in found.problems), found.problems


VERL_BASE = ["trainer.engine=verl", "actor_rollout_ref.model.path=/m", "data.train_files=[/d.parquet]",
             "algorithm.rollout_correction.bypass_mode=true"]


def test_verl_runs_staleness_one_as_its_one_step_off_trainer() -> None:
    from omni_trainer.config import load_config
    from omni_trainer.engines.verl.async_training import async_training_values
    from omni_verl.settings import BATCH_AGENT_LOOP_MANAGER
    from omni_verl_cpu import GLOO_BACKEND
    from omni_trainer.engines.verl.translate import config_problems

    config = load_config([*VERL_BASE, "async_training.max_staleness=1", "rollout.n_gpus_per_node=4"])
    assert config_problems(config) == []
    values = async_training_values(config)
    assert values["actor_rollout_ref.hybrid_engine"] is False
    assert values["actor_rollout_ref.rollout.n_gpus_per_node"] == values["rollout.n_gpus_per_node"] == 4
    assert values["actor_rollout_ref.rollout.checkpoint_engine.backend"] == "nccl"  # on GPUs
    assert values["actor_rollout_ref.rollout.agent.agent_loop_manager_class"] == BATCH_AGENT_LOOP_MANAGER
    cpu = async_training_values(load_config([*VERL_BASE, "trainer.device=cpu", "async_training.max_staleness=1"]))
    assert cpu["actor_rollout_ref.rollout.checkpoint_engine.backend"] == GLOO_BACKEND
    assert async_training_values(load_config(VERL_BASE)) == {}  # synchronous: verl's defaults stay


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["async_training.max_staleness=1", "distillation.enabled=true",
          "distillation.teacher_models.teacher_model.model_path=/t"], "not its one-step-off one"),
        (["async_training.max_staleness=3", "distillation.enabled=true",
          "distillation.teacher_models.teacher_model.model_path=/t"], "not its fully-async one"),
        (["async_training.max_staleness=1", "rollout.n_gpus_per_node=0"], "needs a pool of its own"),
        (["async_training.max_staleness=1", "rollout.n_gpus_per_node=3",
          "actor_rollout_ref.rollout.tensor_model_parallel_size=2"], "do not hold whole replicas"),
        (["async_training.max_staleness=1", "actor_rollout_ref.rollout.checkpoint_engine.backend=naive"],
         "one-step-off rollout runs on its own ranks"),
        # verl-omni's fully-async defaults (sync every 4 steps, 10% ahead) can lag 4 + 5 - 1 updates
        (["async_training.max_staleness=4", "async_training.trigger_parameter_sync_step=4",
          "async_training.staleness_threshold=0.1"], "lag the actor by up to 8 updates"),
        (["async_training.max_staleness=2", "data.train_batch_size=6", "actor_rollout_ref.actor.ppo_mini_batch_size=4"],
         "not a whole number of"),
        (["async_training.max_staleness=2", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
          "async_training.require_batches=1"], "is not data.train_batch_size=8"),
        (["async_training.max_staleness=2", "async_training.use_trainer_do_validate=true"], "does not wire"),
        (["async_training.max_staleness=2", "actor_rollout_ref.rollout.agent.default_agent_loop=omni_speech_agent"],
         "runs every prompt with single_turn_agent"),
        (["async_training.max_staleness=2", "trainer.device=cpu", "async_training.partial_rollout=true"],
         "finishes every request with the weights it started with"),
        (["async_training.max_staleness=2", "trainer.total_training_steps=3", "rollout.total_rollout_steps=10"],
         "set one"),
    ],
)
def test_verl_refuses_what_its_asynchronous_trainers_cannot_run(overrides: list[str], message: str) -> None:
    from omni_trainer.config import load_config
    from omni_trainer.engines.verl.translate import config_problems

    problems = config_problems(load_config([*VERL_BASE, *overrides]))
    assert any(message in problem for problem in problems), problems


def test_verl_runs_deeper_staleness_as_its_fully_async_trainer_within_the_bound() -> None:
    """Unset, verl's knobs follow max_staleness (sync every step, max_staleness - 1 syncs of
    samples ahead), whose worst case is the bound; our batch semantics become verl's (a step
    of data.train_batch_size prompts = whole mini-batches; the run's length in prompts)."""
    from omni_trainer.config import load_config
    from omni_trainer.engines.verl.async_training import (
        async_training_values,
        fully_async_total_steps,
        is_fully_async,
        total_steps,
        worst_staleness,
    )
    from omni_trainer.engines.verl.translate import config_problems

    config = load_config([*VERL_BASE, "async_training.max_staleness=3", "data.train_batch_size=8",
                          "actor_rollout_ref.actor.ppo_mini_batch_size=4", "trainer.total_training_steps=5"])
    assert config_problems(config) == [] and is_fully_async(config) and worst_staleness(config) == 3
    values = async_training_values(config)
    assert values["async_training.staleness_threshold"] == 2 and values["async_training.trigger_parameter_sync_step"] == 1
    assert values["data.train_batch_size"] == 0 and values["data.gen_batch_size"] == 1
    assert values["async_training.require_batches"] == 2  # 8 prompts a step in mini-batches of 4
    assert values["rollout.total_rollout_steps"] == 40 and values["async_training.partial_rollout"] is False
    assert values["actor_rollout_ref.hybrid_engine"] is False and values["actor_rollout_ref.actor.use_rollout_log_probs"]
    assert "actor_rollout_ref.rollout.agent.agent_loop_manager_class" not in values  # no hook: fully_async.py
    # verl-omni's own knobs, at the bound they imply, from a verl script's train_batch_size=0
    verl_omni = load_config([*VERL_BASE, "async_training.max_staleness=8", "async_training.trigger_parameter_sync_step=4",
                             "async_training.staleness_threshold=0.1", "data.train_batch_size=0",
                             "actor_rollout_ref.actor.ppo_mini_batch_size=4", "async_training.require_batches=2",
                             "rollout.total_rollout_steps=100"])
    assert config_problems(verl_omni) == [] and worst_staleness(verl_omni) == 8
    assert async_training_values(verl_omni)["async_training.require_batches"] == 2
    # verl counts a step per weight sync: 100 prompts / (8 a step x 4 steps a sync), rounded down
    assert fully_async_total_steps(verl_omni, train_rows=1000) == total_steps(verl_omni, 1000) == 3
    assert fully_async_total_steps(verl_omni, train_rows=40) == 1  # one epoch of 40 prompts


def test_the_local_engine_refuses_the_asynchronous_verl_keys() -> None:
    from omni_trainer.config import load_config
    from omni_trainer.engines.local.verl_keys import local_refusals

    problems = local_refusals(load_config(["rollout.n_gpus_per_node=2",
                                           "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
                                           "async_training.staleness_threshold=0.1", "rollout.total_rollout_steps=10",
                                           "async_training.partial_rollout=true"]))
    assert len(problems) == 5 and all("verl-engine setting" in p for p in problems), problems
    # the values that describe what the local engine does are honoured
    assert local_refusals(load_config(["async_training.trigger_parameter_sync_step=1",
                                       "async_training.partial_rollout=false"])) == []




def test_a_verl_fully_async_script_may_count_its_step_in_mini_batches() -> None:
    """verl's fully-async scripts set data.train_batch_size=0 (a step is ppo_mini_batch_size x
    require_batches); the range checks and the engines' checks let that through there, and only there."""
    from omni_trainer.config import load_config
    from omni_trainer.engines import engine_for
    from omni_trainer.findings import Findings
    from omni_trainer.preflight import _ranges
    from omni_trainer.resolved import resolve_run

    def batch_problems(*overrides: str) -> list[str]:
        found = Findings()
        run = resolve_run(load_config([*VERL_BASE, "data.train_batch_size=0", *overrides]))
        for check in (_ranges, *engine_for(run.config.trainer.engine).checks):
            check(run, found)
        return [p for p in found.problems if "data.train_batch_size=0" in p]

    assert batch_problems("async_training.max_staleness=2") == []
    assert batch_problems("async_training.max_staleness=1")  # one-step-off draws whole batches
    assert batch_problems("async_training.max_staleness=2", "trainer.engine=local")


def test_the_fully_async_trainers_update_count_follows_its_version_counter_across_a_resume() -> None:
    """Staleness and failure messages count the actor's updates from verl's version counter:
    the k-th step of a fresh run follows k - 1 updates for any sync interval, and the first step
    after resuming from global_step_2 (version 2, a new cycle) follows 2 at T=1 and 8 at T=4,
    where verl's own global_steps would say 3 and 9."""
    pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed --extra gpu)")
    from omni_verl.fully_async import updates_so_far

    for interval in (1, 2, 4):
        # verl's counters before the k-th step of a fresh run: version, then step within the cycle
        assert [updates_so_far((k - 1) // interval, (k - 1) % interval + 1, interval) for k in range(1, 10)] == list(range(9))
    assert updates_so_far(2, 1, 1) == 2 and updates_so_far(2, 1, 4) == 8
