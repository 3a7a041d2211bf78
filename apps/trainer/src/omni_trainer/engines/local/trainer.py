"""The local engine: load what every task shares, then the run loop (resume, Ctrl-C, saving).

The adapters come from the registry (the checkpoint's ``architectures[0]`` and
``actor_rollout_ref.model.stage``), the actor from omni-training; what the run trains for
(its prompts, its step, its validation) is the task's (:mod:`omni_trainer.engines.local.tasks`). How the
run starts in its directory is in :mod:`omni_trainer.run_dir`; what it prints in
:mod:`omni_trainer.reporting`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import torch
from omegaconf import OmegaConf

from omni_contracts import load_processor, require_usable_tokenizer
from omni_rollout.local_engine import LocalEngine
from omni_trainer.config import ConfigError
from omni_trainer.interrupts import StopRequest
from omni_trainer.loggers import build_sinks
from omni_trainer.prompts import Prepared
from omni_trainer.resolved import ResolvedRun
from omni_trainer.reporting import DROPPED_KEY, complete_message, report_step, validation_line, write_summary
from omni_trainer.resume_check import data_fingerprint, record_run
from omni_training.run_guards import RewardFailureError
from omni_training.run_guards import SkippedUpdateWatch
from omni_trainer.run_dir import MetricsLog, RunStart, prepare_run_dir, run_identity
from omni_trainer.settings_builders import (
    actor_settings,
    local_device,
    lora_settings,
    model_dtype,
    optim_settings,
)
from omni_trainer.engines.local.step import StepDiscarded
from omni_trainer.engines.local.task import LoadedRun, Task
from omni_trainer.engines.local.tasks import load_task
from omni_trainer.engines.local.val_generations import ValGenerationsLog
from omni_training.actor import Actor
from omni_training.checkpoint import load_checkpoint, save_checkpoint


class LocalTrainer:
    """``LocalTrainer(run).setup()`` loads; ``fit()`` trains, resuming as ``start`` says.

    Args:
        run: the resolved run (checked by ``omni_trainer.preflight``).
        start: how the run starts in its directory; default: :func:`prepare_run_dir`.
        stop: the run's Ctrl-C flag (the CLI installs it before start-up); default: a new one,
            installed by :meth:`fit`.
    """

    def __init__(
        self, run: ResolvedRun, start: RunStart | None = None, stop: StopRequest | None = None, *,
        scale_out: str | None = None,
    ) -> None:
        self.resolved = run
        self.scale_out = scale_out  # the memory plan's last tip (Engine.scale_out)
        self.config = config = run.config
        self.stop = stop if stop is not None else StopRequest()
        self.start = start if start is not None else prepare_run_dir(config)
        self.run_dir = self.start.run_dir
        for note in self.start.notes:
            print(note)
        self.complete = False
        self.generations: ValGenerationsLog | None = None  # trainer.log_val_generations, set by fit
        self._prepared: dict[int, list[Prepared]] = {}  # prompts_of's, for the steps in flight
        torch.manual_seed(config.trainer.seed)
        random.seed(config.trainer.seed)

    # --- setup ------------------------------------------------------------------------------

    def setup(self) -> None:
        from transformers import AutoConfig

        cfg = self.config
        if self.resolved.model is None:
            from omni_trainer.embedded_model import EMBEDDED_MODEL, embedded_model_path

            tiny = embedded_model_path()
            self.resolved = self.resolved.with_model(tiny)
            print(f"model: {EMBEDDED_MODEL} built offline at {tiny}")
        assert self.resolved.model is not None
        model_path = self.model_path = self.resolved.model.path
        hf_config = AutoConfig.from_pretrained(model_path)
        self.hf_config = hf_config
        self.training_adapter = self.resolved.training_adapter()
        self.rollout_adapter = self.resolved.rollout_adapter()
        self.mode = self.resolved.mode
        self.rollout_adapter.check_mode(self.mode)
        self.processor = load_processor(self.training_adapter, model_path, hf_config)
        self.tokenizer = self.training_adapter.configure_tokenizer(model_path, hf_config)
        require_usable_tokenizer(self.tokenizer, model_path)
        self.run = LoadedRun(self.resolved, model_path, hf_config, self.processor, self.tokenizer)
        self.task: Task = load_task(self.run)
        self.train_rows, self.val_rows = self.task.rows()
        self.total_steps = self._total_steps()
        if self.start.start_step >= self.total_steps:
            self.complete = True  # nothing to train: the weights need not load
            return
        distillation = self.task.distillation()
        self.device = local_device(cfg)
        if self.device != "cpu":
            self._print_gpu_plan(hf_config)
        # Again here: building a tiny checkpoint above (the first run on a machine) draws from
        # the global generators, and the adapter's initial weights must not depend on that.
        torch.manual_seed(cfg.trainer.seed)
        random.seed(cfg.trainer.seed)
        self.actor = Actor.from_pretrained(
            model_path, self.training_adapter,
            settings=actor_settings(cfg, distillation, device=self.device), lora=lora_settings(cfg),
            optim=optim_settings(cfg, self.total_steps), keep_reference=self.task.keeps_reference,
        )
        self.task.build(self.actor, self.device)

    @property
    def engine(self) -> LocalEngine | None:
        """The text engine the task samples with (``None``: a speech task's policy samples)."""
        return self.task.engine

    def _print_gpu_plan(self, hf_config: Any) -> None:
        """What the run needs on the GPU against what it has, before the weights load."""
        from omni_trainer.gpu_plan import run_plan, visible_gpu

        cfg = self.config
        plan = run_plan(cfg, self.model_path, hf_config, self.training_adapter, visible_gpu(), self.scale_out)
        print(plan.text)
        print(f"device: {self.device}, {model_dtype(cfg, self.device)}, gradient checkpointing "
              f"{'on' if cfg.actor_rollout_ref.model.enable_gradient_checkpointing else 'off'}", flush=True)

    def _steps_per_epoch(self) -> int:
        size = self.config.data.train_batch_size
        per_epoch = len(self.train_rows) // size
        if per_epoch == 0:
            raise ConfigError(
                f"Invalid configuration:\n  - data.train_batch_size={size} exceeds the {len(self.train_rows)} "
                "training prompts left after loading (see the dataset report above)"
            )
        return per_epoch

    def _total_steps(self) -> int:
        """``trainer.total_training_steps``, else epochs x steps per epoch (also the LR horizon)."""
        cfg = self.config.trainer
        if cfg.total_training_steps is not None:
            self._steps_per_epoch()  # the batch must fit the data either way
            return cfg.total_training_steps
        return self._steps_per_epoch() * cfg.total_epochs

    # --- the loop -----------------------------------------------------------------------------

    def batches(self, start_step: int) -> Iterator[tuple[int, list[Any]]]:
        """``(step, prompts)`` after ``start_step``, as the task orders them; the order depends
        only on the seed and the step, so a resumed run sees what the uninterrupted one would."""
        for step in range(start_step + 1, self.total_steps + 1):
            prompts = self.prompts_of(step)
            del self._prepared[step]
            yield step, prompts

    def prompts_of(self, step: int) -> list[Prepared]:
        """The prompts of ``step``, prepared once: a task sampling ahead asks for them before
        :meth:`batches` yields them."""
        if step not in self._prepared:
            size = self.config.data.train_batch_size
            indices = self.task.batch_indices(step, size, self._steps_per_epoch(), len(self.train_rows))
            self._prepared[step] = [self.train_rows[i] for i in indices]
        return self._prepared[step]

    def train_step(self, step: int, batch: list[Prepared]) -> dict[str, float]:
        """One step (no stop checks): what benchmarks and tests drive directly."""
        return {**self.task.step(step, batch, lambda: False), DROPPED_KEY: float(self.train_rows.dropped)}

    def fit(self) -> dict[str, float]:
        cfg = self.config
        if self.complete:
            print(complete_message(self.run_dir, self.start.start_step, self.total_steps))
            return {}
        self.run_dir.mkdir(parents=True, exist_ok=True)
        start_step = self.start.start_step
        fingerprint = self.start.fingerprint if self.start.fingerprint is not None else data_fingerprint(cfg)
        for note in record_run(self.run_dir, cfg, fingerprint, step=start_step):
            print(note)
        if self.start.resume_from is not None:
            try:
                load_checkpoint(self.start.resume_from, self.actor)
            except (ValueError, FileNotFoundError) as exc:
                raise ConfigError(f"Invalid configuration:\n  - cannot resume from {self.start.resume_from}: {exc}") from exc
            print(f"resumed from {self.start.resume_from} (step {start_step})")
        self.saved_step = start_step if self.start.resume_from is not None else None
        self.log = MetricsLog(self.run_dir / "metrics.jsonl", resume_after=start_step if self.start.resume_from else None)
        sinks = build_sinks(
            cfg.trainer.logger, self.run_dir, project=cfg.trainer.project_name,
            experiment=cfg.trainer.experiment_name or "", config=OmegaConf.to_container(OmegaConf.structured(cfg)),  # type: ignore[arg-type]
        )
        if cfg.trainer.log_val_generations > 0:
            self.generations = ValGenerationsLog(
                self.run_dir / "val_generations", cfg.trainer.log_val_generations, sinks,
                resume_after=start_step if self.start.resume_from else None,
            )
        stop = self.stop
        skipped = SkippedUpdateWatch()
        step, done, last, final = start_step, start_step, {}, {}
        started = time.perf_counter()
        with stop.installed():
            try:
                self.task.start()
                if cfg.trainer.val_before_train and start_step == 0 and self.task.validates:
                    before = self.validate(0)
                    print(validation_line(0, before), flush=True)
                    self._log(0, {"step": 0.0, **before}, sinks)
                stop.begin_training()
                self.task.prefetch(self.prompts_of, start_step + 1, self.total_steps)
                for step, batch in self.batches(start_step):
                    try:
                        last = {**self.task.step(step, batch, lambda: stop.requested),
                                DROPPED_KEY: float(self.train_rows.dropped)}
                    except StepDiscarded as exc:
                        print(f"{exc} (interrupted; it is not trained on and reruns on resume)", flush=True)
                        break
                    except RewardFailureError:
                        self._save(done)  # the steps trained so far are kept; the failing one was not trained
                        raise
                    done = step
                    if cfg.trainer.test_freq > 0 and step % cfg.trainer.test_freq == 0:
                        last.update(self.validate(step))
                    self._log(step, last, sinks)
                    report_step(self.run_dir, self.log, cfg, step, self.total_steps, last)
                    skipped.observe(step, last, run_dir=str(self.run_dir))  # raises on a run that stopped learning
                    self.task.after_step(self.run_dir, step, first=step == start_step + 1, last=step == self.total_steps)
                    if (cfg.trainer.save_freq > 0 and step % cfg.trainer.save_freq == 0) or step == self.total_steps:
                        self._save(step)
                    if stop.requested:
                        break
                if stop.requested:
                    self._save(done)
                    print(f"\nstopped after step {done}; checkpoint saved. Run the same command to resume.")
                else:
                    final = {k: v for k, v in last.items() if k.startswith(("val-core/", "val/"))} or self.validate(done)
            finally:
                self.task.close()  # the parent stops the reward workers (they ignore SIGINT)
                for sink in sinks:
                    sink.close()
        elapsed = time.perf_counter() - started
        from omni_training.checkpoint import latest_checkpoint

        summary = write_summary(
            self.run_dir, cfg, step=done, steps_this_session=done - start_step, elapsed=elapsed, log=self.log,
            final=final, checkpoint=latest_checkpoint(self.start.checkpoints), uses_lora=self.actor.uses_lora,
            dropped=self.train_rows.dropped,
        )
        print(summary)
        return {**last, **final}

    def _log(self, step: int, metrics: dict[str, float], sinks: list[Any]) -> None:
        self.log.append(metrics)
        for sink in sinks:
            sink.log(step, metrics)

    def validate(self, step: int) -> dict[str, float]:
        """The task's validation metrics (``val-core/*``); with ``trainer.log_val_generations``,
        samples of its answers are logged as ``step``'s."""
        return self.task.validate(step, self.generations)

    def _save(self, step: int) -> None:
        if step == self.saved_step or step == 0:
            return
        state = {"step": step, "identity": run_identity(self.config)}
        save_checkpoint(self.start.checkpoints, step, self.actor, state, keep_last=self.config.trainer.max_checkpoints_to_keep)
        self.saved_step = step
