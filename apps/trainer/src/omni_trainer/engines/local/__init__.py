"""The local engine: omni-rl's own loop (:class:`~omni_trainer.engines.local.trainer.LocalTrainer`)
in this process, on the CPU or one CUDA GPU, with omni-training's losses and estimators."""

from __future__ import annotations

import os
from typing import Any

from omni_contracts import TrainingAdapter

from omni_trainer.config import Config
from omni_trainer.findings import Findings, one_of
from omni_trainer.gpu_plan import Gpu
from omni_trainer.interrupts import StopRequest
from omni_trainer.resolved import ResolvedRun


def _local_algorithms(run: ResolvedRun, found: Findings) -> None:
    """The local engine runs omni-training's losses and estimators."""
    from omni_training.advantages import ADVANTAGE_ESTIMATORS
    from omni_training.policy_loss import POLICY_LOSSES

    config = run.config
    one_of(found, "actor_rollout_ref.actor.policy_loss.loss_mode",
           config.actor_rollout_ref.actor.policy_loss.loss_mode, tuple(POLICY_LOSSES))
    one_of(found, "algorithm.adv_estimator", config.algorithm.adv_estimator, tuple(ADVANTAGE_ESTIMATORS))


def _verl_keys_locally(run: ResolvedRun, found: Findings) -> None:
    """verl-engine keys the overrides gave: honoured, or refused by name (:mod:`omni_trainer.engines.local.verl_keys`)."""
    from omni_trainer.engines.local.verl_keys import local_refusals

    config = run.config
    found.problems.extend(local_refusals(config))
    _local_device(config, found)


def _local_device(config: Config, found: Findings) -> None:
    """The local engine runs on the CPU or one CUDA GPU."""
    device = config.trainer.device
    if device == "npu":
        found.problems.append(
            "trainer.device=npu: the local engine runs on the CPU or one CUDA GPU; use trainer.device=cpu, "
            "cuda or auto"
        )
    elif device == "cuda":
        import torch

        if not torch.cuda.is_available():
            found.problems.append(
                "trainer.device=cuda: no CUDA device is visible here (torch.cuda.is_available() is False: "
                f"torch {torch.__version__}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
                "use trainer.device=cpu or auto (cuda when one is visible), and see `uv run trainer doctor`"
            )


def _batch(run: ResolvedRun, found: Findings) -> None:
    """Every step of the local engine trains on ``data.train_batch_size`` prompts."""
    if run.config.data.train_batch_size == 0:
        found.problems.append("data.train_batch_size=0 must be >= 1")


def _talker_drift(run: ResolvedRun, found: Findings) -> None:
    """``trainer.talker_drift`` probes a thinker run's talker (the verl engine refuses the key)."""
    config = run.config
    if config.trainer.talker_drift and config.actor_rollout_ref.model.stage != "thinker":
        found.problems.append(
            "trainer.talker_drift=true is measured in thinker runs of the local engine only; set "
            "actor_rollout_ref.model.stage=thinker, or trainer.talker_drift=false"
        )


class LocalEngine:
    """Refuses the verl-engine keys it cannot honour, then trains in this process (Ctrl-C
    stops at a step boundary and saves: ``stop``)."""

    name = "local"
    checks = (_local_algorithms, _verl_keys_locally, _batch, _talker_drift)
    marks_start_up = True
    scale_out = "trainer.engine=verl across several GPUs"

    def prepare(self, config: Config) -> list[str]:
        return []  # the embedded default's model and task are built in the run

    def memory_notes(self, config: Config, hf_config: Any, adapter: TrainingAdapter, gpu: Gpu | None) -> list[str]:
        return []  # the plan is the local engine's own

    def run(self, run: ResolvedRun, stop: StopRequest) -> int:
        from omni_trainer.engines.local.trainer import LocalTrainer
        from omni_trainer.run_dir import prepare_run_dir

        trainer = LocalTrainer(run, prepare_run_dir(run.config), stop, scale_out=self.scale_out)
        trainer.setup()
        trainer.fit()
        return 0


ENGINE = LocalEngine()
