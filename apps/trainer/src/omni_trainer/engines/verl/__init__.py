"""The verl engine (``trainer.engine=verl``): verl 0.9.1's own trainer on Ray, on CUDA GPUs with
the vLLM-Omni rollout or on the CPU with the ``omni_local`` rollout, our config, adapters,
rewards and dataset plugged into its extension points.

This module is the engine's entry (:data:`ENGINE`: its pre-flight checks, and the launch,
:func:`launch.run`). Nothing in the package imports verl, Ray or vLLM at module import except
the modules verl itself loads inside its processes (``external``, ``engine``, ``rollout``,
``agent_loop``); the CLI imports it only when ``trainer.engine=verl``.
"""

from __future__ import annotations

from typing import Any

from omni_contracts import TrainingAdapter

from omni_trainer.builtin_files import use_builtin_files
from omni_trainer.config import Config, ConfigError
from omni_trainer.findings import Findings, one_line
from omni_trainer.gpu_plan import Gpu, rollout_memory_problem
from omni_trainer.interrupts import StopRequest
from omni_trainer.library_noise import silence_cpu_platform_noise
from omni_trainer.resolved import ResolvedRun
from omni_trainer.engines.verl.async_training import is_fully_async
from omni_trainer.engines.verl.external_modules import adopt_external_modules


CPU_RANK_MEMORY_GIB = 3.0
"""About the memory one verl rank takes on the CPU before its model (an estimate: a process
with torch, verl and transformers imported, holding its actor and reference workers)."""


def cpu_ranks_warnings(ranks: int) -> list[str]:
    """What a CPU run of ``ranks`` processes costs this machine, when it is more than it has:
    ranks beyond its cores share them (each step slows by about their ratio), and ranks whose
    memory exceeds the machine's swap or are killed."""
    import os

    cores = os.cpu_count() or 1
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    needed = ranks * CPU_RANK_MEMORY_GIB
    warnings = []
    if ranks > cores:
        warnings.append(
            f"trainer.n_gpus_per_node x trainer.nnodes = {ranks} CPU ranks on {cores} cores: each rank is a process "
            f"that computes its share, so the ranks share the cores ({ranks / cores:.0f}x oversubscribed, no faster "
            f"than {cores}); trainer.n_gpus_per_node={cores} or fewer"
        )
    if needed > total:
        warnings.append(
            f"{ranks} CPU ranks need about {needed:.0f} GiB before the model (about {CPU_RANK_MEMORY_GIB:.0f} GiB "
            f"each), and this machine has {total:.0f} GiB; expect swapping or processes killed for memory"
        )
    return warnings


def _rollout_memory(run: ResolvedRun, found: Findings) -> None:
    """verl engine: the rollout's tensor-parallel groups tile the GPUs, and on GPUs its weights
    per GPU leave vLLM room for a KV cache (:func:`omni_trainer.gpu_plan.rollout_memory_problem`)."""
    config = run.config
    rollout, trainer = config.actor_rollout_ref.rollout, config.trainer
    if trainer.device == "cpu":
        found.warnings.extend(cpu_ranks_warnings(trainer.nnodes * trainer.n_gpus_per_node))
        return  # one rollout process per replica, no tensor parallelism, no GPU memory
    key = "actor_rollout_ref.rollout"
    gpus = trainer.nnodes * trainer.n_gpus_per_node
    tp = rollout.tensor_model_parallel_size
    if tp < 1 or gpus % tp:
        found.problems.append(
            f"{key}.tensor_model_parallel_size={tp} does not divide the {gpus} GPUs of trainer.nnodes x "
            f"trainer.n_gpus_per_node; on one GPU set {key}.tensor_model_parallel_size=1"
        )
        return
    if not 0 < rollout.gpu_memory_utilization <= 1:
        found.problems.append(f"{key}.gpu_memory_utilization={rollout.gpu_memory_utilization} must be in (0, 1]")
        return
    if rollout.name != "vllm_omni" or run.model is None:
        return
    from omni_trainer.gpu_plan import model_for_plan, visible_gpu

    model = model_for_plan(run)
    if model is None:
        return  # the model check names the problem
    try:
        problem = rollout_memory_problem(config, *model, visible_gpu())
    except ValueError as exc:
        found.warnings.append(f"the rollout's memory was not checked: {one_line(exc)}")
        return
    if problem:
        found.problems.append(f"trainer.engine=verl: {problem}")


def _verl_engine(run: ResolvedRun, found: Findings) -> None:
    """The verl engine's part: what verl and our translation refuse, before Ray starts."""
    config = run.config
    if config.trainer.device == "npu":
        found.problems.append(
            "trainer.device=npu: trainer.engine=verl runs on CUDA GPUs, or on the CPU (trainer.device=cpu)"
        )
    if config.data.train_batch_size == 0 and not is_fully_async(config):
        # verl's fully-async scripts set 0 and count a step as ppo_mini_batch_size x require_batches
        found.problems.append("data.train_batch_size=0 must be >= 1")
    from omni_trainer.engines.verl.translate import config_problems, config_warnings

    found.problems.extend(f"trainer.engine=verl: {problem}" for problem in config_problems(config))
    found.warnings.extend(f"trainer.engine=verl: {warning}" for warning in config_warnings(config))
    if found.problems:
        return  # verl's own checks need a config that translates
    from omni_trainer.engines.verl.errors import MissingExtrasError, require_extras

    try:
        require_extras()
    except MissingExtrasError as exc:
        found.problems.append(str(exc))
        return
    from omni_trainer.engines.verl.launch import verl_problems

    found.problems.extend(f"trainer.engine=verl: {problem}" for problem in verl_problems(run))


# --- helpers --------------------------------------------------------------------------------------


class VerlEngine:
    """Checks the config as verl will (the translation, verl's own checks, the rollout's
    memory), then launches verl's task runner on Ray."""

    name = "verl"
    checks = (_rollout_memory, _verl_engine)
    marks_start_up = False  # verl's asynchronous trainers start their steps in their own processes
    scale_out = None

    def prepare(self, config: Config) -> list[str]:
        """Export verl's external modules (ours first) before anything imports verl, write the
        embedded default's files (verl reads files), and quiet verl's CPU platform noise."""
        try:
            notes = adopt_external_modules()
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        use_builtin_files(config)
        if config.trainer.device == "cpu":
            silence_cpu_platform_noise()
        return notes

    def memory_notes(self, config: Config, hf_config: Any, adapter: TrainingAdapter, gpu: Gpu | None) -> list[str]:
        """Whether the rollout's weights per GPU leave vLLM-Omni a KV cache."""
        rollout = config.actor_rollout_ref.rollout
        problem = rollout_memory_problem(config, hf_config, adapter, gpu)
        return [problem or f"verl rollout: its weights per GPU (tensor_model_parallel_size="
                           f"{rollout.tensor_model_parallel_size}) leave a KV cache in gpu_memory_utilization="
                           f"{rollout.gpu_memory_utilization} of the GPU"]

    def run(self, run: ResolvedRun, stop: StopRequest) -> int:
        """``stop``: a synchronous run's trainer stops at a step's end on Ctrl-C (saved, exit 0);
        the asynchronous trainers quit at once (verl's saved checkpoints are kept)."""
        from omni_trainer.engines.verl import launch

        return launch.run(run, checked=True, stop=stop)  # the pre-flight ran verl's checks (VerlEngine.checks)


ENGINE = VerlEngine()
