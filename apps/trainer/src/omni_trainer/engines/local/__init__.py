"""The local engine: omni-rl's own loop (:class:`~omni_trainer.engines.local.trainer.LocalTrainer`)
in this process, on the CPU or one CUDA GPU, with omni-training's losses and estimators."""

from __future__ import annotations

import os

from omni_trainer.config import Config
from omni_trainer.findings import Findings, one_of
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


class LocalEngine:
    """Refuses the verl-engine keys it cannot honour, then trains in this process (Ctrl-C
    stops at a step boundary and saves: ``stop``)."""

    name = "local"
    checks = (_local_algorithms, _verl_keys_locally)

    def run(self, run: ResolvedRun, stop: StopRequest) -> int:
        from omni_trainer.engines.local.trainer import LocalTrainer
        from omni_trainer.run_dir import prepare_run_dir

        trainer = LocalTrainer(run, prepare_run_dir(run.config), stop)
        trainer.setup()
        trainer.fit()
        return 0


ENGINE = LocalEngine()
