"""The verl pre-flight's batch-split check against verl's own splitting code.

For a generated grid of rank counts 1-8 and batch sizes, one step is split the way verl
0.9.1's V1 trainer and FSDP workers split it, running verl's functions on dummy tensors:
the padding multiple (``PPOTrainer._get_required_batch_multiple``), each rank's share, the
old and the reference log-probs' micro-batches (``prepare_micro_batches``, whose assertion is
"data size must be divisible by force_group_size * micro_batch_size_per_gpu"), the update's
mini-batches (``make_iterator``) and their micro-batches. Two conditions verl asserts inline
(``utils/config.py:124`` in ``validate_config``, ``workers/engine_workers.py:267`` in the
update) are restated here. Every config the pre-flight passes splits a step (its
``train_batch_size * n`` samples: a failed sample stays in the step, masked) without an
assertion; every config it refuses trips one.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

if importlib.util.find_spec("verl") is None:  # pragma: no cover
    pytest.skip("needs the distributed extra (uv sync --extra distributed)", allow_module_level=True)

from omni_trainer.engines.verl.batch_split import BatchPlan, batch_split_problems  # noqa: E402

LENGTH = 8  # tokens a dummy sample has


def verl_splits(plan: BatchPlan, samples: int) -> str | None:
    """verl's assertion message on splitting a step of ``samples`` samples, or ``None``."""
    from tensordict import TensorDict
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.utils import prepare_micro_batches

    world, update = plan.world, plan.update_samples

    def micro_batches(rows: int, micro: int, dynamic: bool, tokens: int) -> None:
        data = TensorDict({"input_ids": torch.zeros(rows, LENGTH), "attention_mask": torch.ones(rows, LENGTH)},
                          batch_size=[rows])
        tu.assign_non_tensor(data, use_dynamic_bsz=dynamic, micro_batch_size_per_gpu=micro, max_token_len_per_gpu=tokens)
        prepare_micro_batches(data)

    try:
        if not plan.use_dynamic_bsz:  # verl/utils/config.py:124, in validate_config before launch
            assert plan.train_batch_size * plan.n % world == 0, "real_train_batch_size must be divisible by n_gpus"
        trainer = SimpleNamespace(use_critic=False, global_steps=1, config=SimpleNamespace(
            trainer=SimpleNamespace(critic_warmup=0),
            actor_rollout_ref=SimpleNamespace(actor=SimpleNamespace(ppo_mini_batch_size=plan.ppo_mini_batch_size),
                                              rollout=SimpleNamespace(n=plan.n))))
        multiple = PPOTrainer._get_required_batch_multiple(trainer, world)  # type: ignore[arg-type]
        padded = -(-samples // multiple) * multiple
        share = padded // world  # TransferQueue's chunk of a batch padded to a multiple of the ranks
        micro_batches(share, plan.log_prob_micro_batch_size_per_gpu, plan.log_prob_use_dynamic_bsz,
                      plan.log_prob_max_token_len_per_gpu)
        if plan.ref_log_prob_micro_batch_size_per_gpu is not None:
            micro_batches(share, plan.ref_log_prob_micro_batch_size_per_gpu, plan.ref_log_prob_use_dynamic_bsz,
                          plan.ref_log_prob_max_token_len_per_gpu)
        assert update % world == 0, f"Got mini_batch_size={update} and get_data_parallel_size()={world}"  # engine_workers.py:267
        rank = TensorDict({"input_ids": torch.zeros(share, LENGTH)}, batch_size=[share])
        for mini in tu.make_iterator(rank, mini_batch_size=update // world, epochs=1):
            micro_batches(len(mini), plan.ppo_micro_batch_size_per_gpu, plan.use_dynamic_bsz, plan.ppo_max_token_len_per_gpu)
    except AssertionError as exc:
        return str(exc) or "assertion"
    return None


def grid() -> list[BatchPlan]:
    plans = []
    for world, train, n in itertools.product(range(1, 9), (1, 2, 3, 4, 6, 8, 16), (1, 2, 3, 4, 8)):
        for mini in sorted({1, 2, train // 2, train} - {0}):
            if mini > train or train % mini:
                continue  # refused by the common pre-flight (preflight._ranges)
            for micro, log_prob_micro in itertools.product((1, 2, 3, 4, 16), (1, 4, 16)):
                plans.append(BatchPlan(world=world, train_batch_size=train, n=n, ppo_mini_batch_size=mini,
                                       ppo_micro_batch_size_per_gpu=micro, log_prob_micro_batch_size_per_gpu=log_prob_micro,
                                       ref_log_prob_micro_batch_size_per_gpu=micro if (train + n) % 2 else None,
                                       sequence_length=LENGTH))
    return plans


def test_no_config_the_preflight_passes_trips_verls_split_and_each_refusal_would() -> None:
    passed = refused = 0
    for plan in grid():
        problems = batch_split_problems(plan)
        tripped = verl_splits(plan, plan.train_batch_size * plan.n)
        if problems:
            refused += 1
            assert tripped, (plan, problems)
        else:
            passed += 1
            assert tripped is None, (plan, tripped)
    assert passed > 1000 and refused > 1000  # the grid covers both sides broadly


@pytest.mark.parametrize("dynamic", ["actor", "rollout", "ref"])
def test_dynamic_batch_sizes_need_the_longest_sequence_to_fit(dynamic: str) -> None:
    plan = BatchPlan(world=2, train_batch_size=4, n=2, ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=1,
                     log_prob_micro_batch_size_per_gpu=1, ref_log_prob_micro_batch_size_per_gpu=1,
                     use_dynamic_bsz=True, log_prob_use_dynamic_bsz=True, ref_log_prob_use_dynamic_bsz=True,
                     sequence_length=LENGTH, ppo_max_token_len_per_gpu=LENGTH, log_prob_max_token_len_per_gpu=LENGTH,
                     ref_log_prob_max_token_len_per_gpu=LENGTH)
    assert batch_split_problems(plan) == [] and verl_splits(plan, 8) is None
    field = {"actor": "ppo_max_token_len_per_gpu", "rollout": "log_prob_max_token_len_per_gpu",
             "ref": "ref_log_prob_max_token_len_per_gpu"}[dynamic]
    short = BatchPlan(**{**plan.__dict__, field: LENGTH - 1})
    (problem,) = batch_split_problems(short)
    assert f"{field.removeprefix('ref_')}={LENGTH - 1} is under the longest sequence" in problem
    assert "max_token_len must be greater than the sequence length" in str(verl_splits(short, 8))
    mixed = BatchPlan(**{**plan.__dict__, "log_prob_use_dynamic_bsz": False})
    assert any("log_prob_use_dynamic_bsz=False differ" in p for p in batch_split_problems(mixed))


def test_the_reported_run_on_four_ranks_is_refused_before_ray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``uv run trainer trainer.engine=verl trainer.device=cpu trainer.n_gpus_per_node=4`` on the
    embedded default passed the pre-flight and failed 4.6 minutes later in ``compute_log_prob``
    with "data size must be divisible by force_group_size * micro_batch_size_per_gpu"."""
    import ray

    from omni_trainer.cli import main

    def no_ray(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("ray.init was called: the refusal came too late")

    monkeypatch.setattr(ray, "init", no_ray)
    monkeypatch.setenv("OMNI_RL_CACHE", os.environ.get("OMNI_RL_CACHE", str(tmp_path / "cache")))
    code = main(["trainer.engine=verl", "trainer.device=cpu", "trainer.n_gpus_per_node=4",
                 f"trainer.default_local_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32 does not divide the 16 samples each rank "
            "takes per step (64 a step, padded to whole updates, over trainer.nnodes x trainer.n_gpus_per_node = 4 ranks)"
            ) in err
    assert "use one of 1, 2, 4, 8, 16" in err
    assert not (tmp_path / "run").exists()  # refused before the run directory was touched


def test_more_cpu_ranks_than_the_machine_has_are_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    """``trainer.n_gpus_per_node=64`` on 2 cores and 23 GB was accepted without a word."""
    from omni_trainer.engines.verl import cpu_ranks_warnings

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    machine = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 23 * 2**30 // 4096}
    monkeypatch.setattr(os, "sysconf", machine.__getitem__)
    cores, memory = cpu_ranks_warnings(64)
    assert cores.startswith("trainer.n_gpus_per_node x trainer.nnodes = 64 CPU ranks on 2 cores")
    assert "trainer.n_gpus_per_node=2 or fewer" in cores
    assert memory.startswith("64 CPU ranks need about 192 GiB before the model") and "has 23 GiB" in memory
    assert cpu_ranks_warnings(2) == []
