"""``trainer.engine=verl``: translate the config, start or attach Ray, run verl's trainer.

Ray: ``ray_kwargs.ray_init.address`` unset starts a local Ray on this machine;
``address=auto`` attaches to a cluster started with ``ray start --head`` (multi-node:
see docs/engines/verl-gpu.md, "Multi-node"). Either way the runtime env carries
``VERL_USE_EXTERNAL_MODULES`` and our settings to every worker, since verl does not
forward that variable itself.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import os
import sys
from datetime import datetime, timezone
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from omni_trainer.config import Config, ConfigError
from omni_trainer.resume_check import check_resume, data_fingerprint, record_run, resume_notes
from omni_trainer.run_dir import refuse_later_steps
from omni_trainer.interrupts import StopRequest, workers_ignore_sigint
from omni_trainer.resolved import ResolvedRun
from omni_training.run_guards import RewardFailureError
from omni_trainer.engines.verl.async_training import is_fully_async, prompts_per_step, total_steps
from omni_trainer.engines.verl.distillation import check_teacher_tokenizer, validate_with_verl
from omni_trainer.engines.verl.errors import GpuRequiredError, require_extras
from omni_trainer.engines.verl.batch_split import BatchPlan, batch_split_problems
from omni_trainer.engines.verl.console import QuietConsole
from omni_trainer.engines.verl.checkpoints import (
    STEP_PREFIX,
    auto_resume_point,
    checkpoint_problem,
    later_steps,
    step_dirs,
    tracked_step,
)
from omni_trainer.engines.verl.progress import StepReporter
from omni_verl.stop import stop_file
from omni_trainer.engines.verl.external_modules import EXTERNAL_MODULES_ENV, external_modules
from omni_verl.settings import CPU_PLATFORM_ENV, SETTINGS_ENV, VerlSettings
from omni_trainer.engines.verl.tasks import verl_task
from omni_trainer.engines.verl.translate import check_config, settings_for, to_verl_config
from omni_verl_cpu import PLATFORM as CPU_PLATFORM


def adapter_lora_defaults(run: ResolvedRun) -> tuple[list[str] | None, str | None]:
    """The run's training adapter's LoRA defaults (none for the embedded model, whose
    checkpoint is written later)."""
    if run.model is None:
        return None, None
    if run.model.config is None:
        raise ConfigError(f"actor_rollout_ref.model.path={run.model.path}: {run.model.problem}")
    adapter = run.training_adapter()
    targets = list(adapter.lora_target_modules) if adapter.lora_target_modules else None
    return targets, adapter.lora_exclude_modules


def build_verl_config(run: ResolvedRun) -> DictConfig:
    """verl's config for ``run``: translated once for the run (the pre-flight's checks and the
    launch share it), a copy for each caller (the launch adds the run's metrics file)."""

    def translate() -> DictConfig:
        check_config(run.config)
        targets, exclude = adapter_lora_defaults(run)
        return to_verl_config(run.config, lora_target_modules=targets, lora_exclude_modules=exclude)

    return copy.deepcopy(run.once("verl_config", translate))


def ray_init_kwargs(verl_config: DictConfig) -> dict[str, Any]:
    """What ``ray.init`` gets: verl's default runtime env merged with ``ray_kwargs.ray_init``
    (ours on top), exactly as verl's ``run_ppo`` would merge them.

    An unset ``address`` starts a Ray of the run's own (``"local"``), as documented. Ray given
    no address would attach to any cluster a ``ray start`` left running on this machine, and
    then refuse ``num_cpus``. ``RAY_ADDRESS`` in the environment still attaches, as in Ray."""
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    container = OmegaConf.to_container(verl_config.ray_kwargs.ray_init, resolve=True)
    assert isinstance(container, dict)
    ray_init: dict[str, Any] = {str(k): v for k, v in container.items()}
    runtime_env = OmegaConf.merge(get_ppo_ray_runtime_env(verl_config), ray_init.get("runtime_env") or {})
    ray_init["runtime_env"] = OmegaConf.to_container(runtime_env, resolve=True)
    if ray_init.get("address") is None and not os.environ.get("RAY_ADDRESS"):
        ray_init["address"] = "local"
    return {k: v for k, v in ray_init.items() if v is not None}


def verl_problems(run: ResolvedRun) -> list[str]:
    """The verl engine's part of the pre-flight (``omni_trainer.preflight``): the translation,
    the teacher's tokenizer, verl's losses and estimators, verl's own distillation checks."""
    config = run.config
    try:
        verl_config = build_verl_config(run)  # config errors first: verl takes ~25 s to import
        check_teacher_tokenizer(config, verl_config.actor_rollout_ref.model.path)
    except ConfigError as exc:
        return exc.problems
    from omni_verl.external import check_algorithms

    problems = []
    try:
        check_algorithms(config.actor_rollout_ref.actor.policy_loss.loss_mode, config.algorithm.adv_estimator)
    except ValueError as exc:
        problems.append(str(exc))
    try:
        validate_with_verl(verl_config)  # verl's own distillation checks, otherwise first run inside Ray
    except ConfigError as exc:
        problems.extend(exc.problems)
    if not verl_task(config).offline:  # an offline run splits pairs (tasks.preference_problems)
        problems.extend(batch_split_problems(batch_plan(config, verl_config)))
    return problems


def batch_plan(config: Config, verl_config: DictConfig) -> BatchPlan:
    """How verl will split the run's steps (:mod:`omni_trainer.engines.verl.batch_split`): a
    reference model of its own runs for a KL term without LoRA; a fully-async step is the
    prompts it trains on."""
    from verl.trainer.ppo.utils import need_reference_policy

    separate = need_reference_policy(verl_config) and config.actor_rollout_ref.model.lora_rank == 0
    plan = BatchPlan.from_verl(verl_config, separate_reference=separate)
    if is_fully_async(config):
        plan = dataclasses.replace(plan, train_batch_size=prompts_per_step(config))
    return plan


def check_data(verl_config: DictConfig) -> int:
    """Load the train and validation files through the dataset class verl will use, with the
    adapter's processor: every row parsed, every medium decoded, drops counted and printed.
    Returns the number of training rows kept."""
    from omni_verl.dataset import OmniRLHFDataset
    from omni_verl.processor import adapter_processor

    processor = adapter_processor(VerlSettings.from_env())
    tokenizer = getattr(processor, "tokenizer", processor)
    sizes = {}
    for key in ("train_files", "val_files"):
        print(f"data.{key}: ", end="", flush=True)
        sizes[key] = len(OmniRLHFDataset(list(verl_config.data[key]), tokenizer, verl_config.data, processor))
    return sizes["train_files"]


def require_gpu(run_dir: Path, cuda_available: Callable[[], bool] | None = None) -> None:
    """Stop with one message when no CUDA GPU is visible (verl's actor and vLLM-Omni need one)."""
    import torch

    if (cuda_available or torch.cuda.is_available)():
        return
    raise GpuRequiredError(
        "trainer.engine=verl needs a CUDA GPU: verl's FSDP actor and the vLLM-Omni rollout run only "
        "on GPUs, and none is visible here. The config, the model and the data checked out (verl's "
        f"resolved config is in {run_dir / 'verl_config.yaml'}). Run the same command on a GPU "
        "machine, or train on this one with trainer.engine=local."
    )


METRICS_FILE_ENV = "VERL_FILE_LOGGER_PATH"
"""Where verl's ``file`` logger writes (it truncates an existing file: one per launch)."""


def metrics_file(run_dir: Path) -> Path:
    """This launch's metrics file: ``<run_dir>/metrics/verl-<UTC time>.jsonl``, one JSON line
    per step (``{"step": N, "data": {...}}``, verl's metric names)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = run_dir / "metrics" / f"verl-{stamp}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def resumed_step(config: Config, run_dir: Path) -> tuple[int, Path] | None:
    """The step verl resumes from and the run directory that checkpoint belongs to; ``None``
    when the run starts over (verl's ``_load_checkpoint``: ``auto`` takes the step
    ``latest_checkpointed_iteration.txt`` names, which :func:`record_start` has checked;
    ``resume_path`` the given one, N from its name)."""
    trainer = config.trainer
    if trainer.resume_mode == "resume_path" and trainer.resume_from_path:
        path = Path(os.path.abspath(os.path.expanduser(trainer.resume_from_path)))
        return int(path.name.split(STEP_PREFIX)[-1]), path.parent
    step = tracked_step(run_dir) if trainer.resume_mode == "auto" else 0
    return (step, run_dir) if step > 0 else None


def record_start(config: Config, run_dir: Path) -> int:
    """Check what the run resumes (``auto``: the newest usable checkpoint, damaged newer ones set
    aside; ``resume_path``: refused into a directory holding later steps, which verl would
    overwrite), compare this run with it (refusing other settings or data unless
    ``trainer.resume_anyway``), then record its ``config.yaml`` and data fingerprint; returns
    the step it starts after."""
    if config.trainer.resume_mode == "auto":
        for note in auto_resume_point(run_dir).notes:
            print(note)
    resumed = resumed_step(config, run_dir)
    fingerprint = data_fingerprint(config)
    step = 0
    if resumed is not None:
        step, origin = resumed
        if config.trainer.resume_mode == "resume_path":
            checkpoint = origin / f"{STEP_PREFIX}{step}"
            problem = checkpoint_problem(checkpoint) if checkpoint.is_dir() else "no such directory"
            if problem:
                raise ConfigError(
                    f"Invalid configuration:\n  - trainer.resume_from_path={checkpoint} cannot be resumed "
                    f"({problem}); point it at a whole global_step_<N> folder of a verl run"
                )
            refuse_later_steps(run_dir, later_steps(run_dir, step), checkpoint, step)
        for note in resume_notes(check_resume(config, origin, step, fingerprint), step):
            print(note)
    for note in record_run(run_dir, config, fingerprint, step=step):
        print(note)
    return step


def unwrap_reward_failure(exc: BaseException) -> RewardFailureError | None:
    """The :class:`RewardFailureError` a Ray task raised (Ray re-raises it wrapped in a
    ``RayTaskError``, whose text is the remote traceback), as a plain one; else ``None``."""
    cause = getattr(exc, "cause", None)
    return RewardFailureError(str(cause)) if isinstance(cause, RewardFailureError) else None


DISK_FULL_SIGNS = ("No space left on device", "PytorchStreamWriter failed writing file")
"""How a save that ran out of disk fails in verl's workers: Python's ENOSPC, torch's writer."""


def checkpoint_space_error(exc: BaseException, run_dir: Path) -> Exception | None:
    """The plain message for a verl run whose save ran out of disk space (the workers' error
    arrives as a Ray traceback), with what is free and what a checkpoint takes (the newest
    saved step's size); ``None`` for any other error."""
    text = str(exc)
    if not any(sign in text for sign in DISK_FULL_SIGNS):
        return None
    import shutil

    from omni_training.checkpoint import CheckpointSpaceError, space_message

    steps = step_dirs(run_dir)
    newest = steps[-1][1] if steps else None
    needed = sum(p.stat().st_size for p in newest.rglob("*") if p.is_file()) if newest else 0
    size = f"a checkpoint needs about {needed / 2**20:.0f} MB (the size of {newest.name})" if newest else (
        "a checkpoint's size is not known yet (none was saved)")
    return CheckpointSpaceError(space_message(run_dir, shutil.disk_usage(run_dir).free, size, "the save failed", newest))


def run(resolved: ResolvedRun, *, checked: bool = False, stop: StopRequest | None = None) -> int:
    """Run ``resolved`` on verl; returns the process exit code.

    Args:
        checked: the pre-flight already ran verl's checks on this run (``trainer`` does
            before every run); otherwise they run here first.
        stop: the ``trainer`` process's Ctrl-C flag. In a synchronous run a Ctrl-C asks our
            trainer to stop at the end of the step (:mod:`omni_verl.trainer`):
            it saves, and the run exits 0 (130 if it came before the first step). Ray's
            processes ignore SIGINT (they are started with it ignored), so the step finishes.
    """
    require_extras()
    problems = [] if checked else verl_problems(resolved)
    if problems:
        raise ConfigError("Invalid configuration for trainer.engine=verl:\n  - " + "\n  - ".join(problems))
    config = resolved.config
    verl_config = build_verl_config(resolved)
    # The driver imports verl below: it must see the same external modules as the workers.
    os.environ[EXTERNAL_MODULES_ENV] = external_modules(os.environ.get(EXTERNAL_MODULES_ENV))[0]
    os.environ[SETTINGS_ENV] = settings_for(config, verl_config.actor_rollout_ref.model.path).to_env()
    on_cpu = verl_config.trainer.device == "cpu"
    if on_cpu:
        from omni_verl_cpu.platform import use_cpu_platform  # CPU runs only: GPU runs never import the plugin

        os.environ[CPU_PLATFORM_ENV] = CPU_PLATFORM
        use_cpu_platform()  # the pre-flight may already have resolved verl's platform here

    import ray

    if verl_task(config).offline:
        return run_offline(config, verl_config, on_cpu=on_cpu)
    from ray.exceptions import RayTaskError
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(verl_config)
    checked_config = verl_config
    if is_fully_async(config):
        # Its steps are streamed samples (train_batch_size=0), which verl's synchronous checks
        # refuse and its fully-async entry point does not check; checked as the steps they make.
        checked_config = copy.deepcopy(verl_config)
        with open_dict(checked_config):
            checked_config.data.train_batch_size = prompts_per_step(config)
    said = io.StringIO()  # verl's validate_config prints its verdict and deprecation notes
    try:
        with contextlib.redirect_stdout(said):
            validate_config(
                config=checked_config, use_reference_policy=need_reference_policy(verl_config),
                use_critic=need_critic(verl_config),
            )
    except BaseException:
        print(said.getvalue(), end="")
        raise
    run_dir, start_step, metrics = record_launch(config, verl_config)
    train_rows = check_data(verl_config)
    if not on_cpu:
        require_gpu(run_dir)
    runner = task_runner(config, TaskRunnerV1)
    stops_at_step_end = stop is not None and runner is TaskRunnerV1  # our omni_sync trainer runs in it
    with QuietConsole(run_dir) as console:
        if not ray.is_initialized():
            with workers_ignore_sigint() if stops_at_step_end else contextlib.nullcontext():
                ray.init(**ray_init_kwargs(verl_config))
        reporter = StepReporter(
            run_dir, metrics, config, total_steps(config, train_rows),
            start_step=start_step if config.trainer.resume_mode == "resume_path" else None, out=console,
        ).start()
        if stop is not None and stops_at_step_end:
            stop.on_request.append(lambda: stop_file(run_dir).touch())
            stop.begin_training()
        try:
            run_ppo(verl_config, task_runner_class=runner)
        except RayTaskError as exc:  # raised in verl's task runner (by our agent-loop manager, or a save)
            failure = unwrap_reward_failure(exc) or checkpoint_space_error(exc, run_dir)
            if failure is None:
                raise
            raise failure from None
        finally:
            ray.shutdown()
            stop_file(run_dir).unlink(missing_ok=True)
    print(reporter.finish(uses_lora=config.actor_rollout_ref.model.lora_rank > 0))
    if stop is not None and stop.requested:
        if reporter.last_step <= start_step:
            print("interrupted during start-up: stopped; nothing was trained in this session", file=sys.stderr)
            return 130
        print(f"\nstopped after step {reporter.last_step}; checkpoint saved. Run the same command to resume.")
    return 0


def task_runner(config: Config, synchronous: Any) -> Any:
    """verl's task runner for ``config``: its one-step-off trainer's for
    ``async_training.max_staleness=1``, ours around its fully-async one above that
    (:mod:`omni_trainer.engines.verl.async_training`), else ``synchronous`` (verl's V1 runner)."""
    from omni_trainer.engines.verl.async_training import is_fully_async, is_one_step_off

    if is_one_step_off(config):
        from verl.experimental.one_step_off_policy.main_ppo import OneStepTaskRunner

        return OneStepTaskRunner
    if is_fully_async(config):
        from omni_verl.fully_async import OmniFullyAsyncTaskRunner

        return OmniFullyAsyncTaskRunner
    return synchronous


def record_launch(config: Config, verl_config: DictConfig) -> tuple[Path, int, Path]:
    """Record the run (the resume check, ``config.yaml``) and point verl's ``file`` logger at
    this launch's metrics file; returns the run directory, the step the run resumes after
    and that metrics file. verl's resolved config goes to ``verl_config.yaml``."""
    run_dir = Path(config.trainer.default_local_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    stop_file(run_dir).unlink(missing_ok=True)  # a stop asked of an earlier launch
    start_step = record_start(config, run_dir)
    metrics = metrics_file(run_dir)
    with open_dict(verl_config):
        verl_config.ray_kwargs.ray_init.runtime_env.env_vars[METRICS_FILE_ENV] = str(metrics)
    (run_dir / "verl_config.yaml").write_text(OmegaConf.to_yaml(verl_config))
    return run_dir, start_step, metrics


def run_offline(config: Config, verl_config: DictConfig, *, on_cpu: bool) -> int:
    """An offline preference run: verl's actor workers only, driven from this process
    (:mod:`omni_trainer.engines.verl.preference`)."""
    import ray

    from omni_trainer.engines.verl.preference import PreferenceRun
    from omni_verl.processor import adapter_processor

    run_dir, start_step, metrics = record_launch(config, verl_config)
    os.environ[METRICS_FILE_ENV] = str(metrics)  # verl's Tracking runs in this process
    run = PreferenceRun(config, verl_config, adapter_processor(VerlSettings.from_env()), run_dir)
    if start_step >= run.total_steps:
        from omni_trainer.reporting import complete_message

        print(complete_message(run_dir, start_step, run.total_steps))
        return 0
    if not on_cpu:
        require_gpu(run_dir)
    if not ray.is_initialized():
        ray.init(**ray_init_kwargs(verl_config))
    reporter = StepReporter(run_dir, metrics, config, run.total_steps, start_step=start_step).start()
    resumed = resumed_step(config, run_dir)
    try:
        run.start_workers()
        run.fit(start_step, resume_from=resumed[1] if resumed else None)
    finally:
        ray.shutdown()
    print(reporter.finish(uses_lora=config.actor_rollout_ref.model.lora_rank > 0, dropped=run.train.dropped))
    return 0
