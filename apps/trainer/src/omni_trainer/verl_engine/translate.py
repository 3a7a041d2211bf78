"""Our resolved config -> verl's: verl's packaged ``ppo_trainer.yaml`` defaults, our keys set.

Keys keep verl's names; where ours differ in meaning the mapping is explicit below
(``trainer.test_freq=0`` -> ``-1``; a missing ``clip_ratio_low/high`` -> ``clip_ratio``;
LoRA targets default to the adapter's). Our modules go into verl's extension keys:
``data.custom_cls``, ``reward.custom_reward_function``, ``actor_rollout_ref.model.model_type``
(our FSDP engine), ``actor_rollout_ref.rollout.name`` (our vLLM-Omni replica, also the
distillation teacher's server) and the agent loop; ``distillation.*`` maps in
``verl_engine.distillation``. Only Hydra and OmegaConf are imported here; verl's YAML is read
from its install.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from omni_trainer.config import Config, ConfigError
from omni_trainer.verl_engine.distillation import distillation_problems, distillation_values
from omni_trainer.verl_engine.errors import EXTRAS_COMMAND, MissingExtrasError
from omni_trainer.verl_engine.settings import (
    AGENT_LOOP_MANAGER,
    AGENT_LOOPS,
    CPU_PLATFORM_ENV,
    EXTERNAL_MODULE,
    LOCAL_ROLLOUT_NAME,
    EXTERNAL_MODULES_ENV,
    OMNI_MODEL_TYPE,
    SETTINGS_ENV,
    SPEECH_AGENT_LOOP,
    VerlSettings,
)

DATASET_CLASS = ("pkg://omni_trainer.verl_engine.dataset", "OmniRLHFDataset")
REWARD_FUNCTION = ("pkg://omni_trainer.verl_engine.reward", "compute_score")
SCORER_PROCESSES_PER_REWARD_WORKER = 2
"""Scorer processes each of verl's reward-loop workers starts when ``reward.num_workers`` is
unset (verl runs ``reward.num_workers`` = 8 such workers per job; one process per CPU in each
would start 8x the CPUs)."""


def verl_config_dir() -> Path:
    """verl's packaged Hydra config directory (found without importing verl)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtrasError(f"verl is not installed; install it with: {EXTRAS_COMMAND}")
    return Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"


def verl_defaults() -> DictConfig:
    """verl's ``ppo_trainer`` config as its own entry point composes it (no overrides)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return compose(config_name="ppo_trainer")


def settings_for(config: Config, model_path: str) -> VerlSettings:
    model = config.actor_rollout_ref.model
    rollout = config.actor_rollout_ref.rollout
    return VerlSettings(
        model_path=model_path, stage=model.stage,
        freeze_vision_tower=model.freeze_vision_tower, freeze_audio_tower=model.freeze_audio_tower,
        pipeline_name=rollout.pipeline(), pipeline_mode=rollout.pipeline_mode,
        audio_rewards_json=json.dumps([dict(spec) for spec in config.reward.audio_rewards], sort_keys=True),
    )


def to_verl_config(
    config: Config,
    *,
    lora_target_modules: list[str] | None,
    lora_exclude_modules: str | None,
    model_path: str | None = None,
) -> DictConfig:
    """verl's config for ``config``. ``lora_*`` are the adapter's defaults (used when the
    config names none); ``model_path`` overrides ``actor_rollout_ref.model.path``.

    Raises:
        ConfigError: the config cannot run on verl (no data files, unknown agent loop).
    """
    check_config(config)
    model_path = model_path or config.actor_rollout_ref.model.path
    if model_path is None:
        raise ConfigError(
            "trainer.engine=verl needs actor_rollout_ref.model.path (the embedded tiny model is "
            "built by `uv run trainer tiny`; pass its directory)."
        )
    verl = verl_defaults()
    with open_dict(verl):
        for key, value in _values(config, model_path, lora_target_modules, lora_exclude_modules).items():
            OmegaConf.update(verl, key, value, merge=False, force_add=True)
    return verl


def check_config(config: Config) -> None:
    """Raise :class:`ConfigError` listing every reason ``config`` cannot run on verl."""
    problems = config_problems(config)
    if problems:
        raise ConfigError("Invalid configuration for trainer.engine=verl:\n  - " + "\n  - ".join(problems))


def config_problems(config: Config) -> list[str]:
    """Why ``config`` cannot run on verl (cheap checks; part of ``omni_trainer.preflight``)."""
    problems = []
    if not config.data.train_files:
        problems.append(
            "data.train_files is required (the built-in task exists for the local engine only); "
            "convert a dataset with `uv run trainer convert ...`"
        )
    loop = config.actor_rollout_ref.rollout.agent.default_agent_loop
    if loop not in AGENT_LOOPS:
        problems.append(
            f"actor_rollout_ref.rollout.agent.default_agent_loop={loop!r} has no verl agent loop; "
            f"valid: {', '.join(AGENT_LOOPS)}"
        )
    if config.trainer.device == "cpu":
        problems.extend(cpu_problems(config))
    elif config.actor_rollout_ref.model.stage == "talker":
        problems.extend(speech_problems(config))
    problems.extend(distillation_problems(config))
    return problems


def cpu_problems(config: Config) -> list[str]:
    """What ``trainer.device=cpu`` does not run yet: its rollout (``omni_local``) samples a text
    policy, and verl's distillation teacher is a server on a GPU pool of its own."""
    problems = []
    if config.actor_rollout_ref.model.stage != "thinker":
        problems.append(
            f"trainer.device=cpu: actor_rollout_ref.model.stage={config.actor_rollout_ref.model.stage} is not "
            "served by the CPU rollout (omni_local samples a thinker's text); train the talker with "
            "trainer.engine=local, or on verl with vLLM-Omni on GPUs"
        )
    if config.distillation.enabled:
        problems.append(
            "trainer.device=cpu: distillation.enabled=true needs verl's teacher server on a GPU pool; "
            "use trainer.engine=local for on-policy distillation on the CPU"
        )
    if config.actor_rollout_ref.rollout.name not in ("vllm_omni", LOCAL_ROLLOUT_NAME):
        problems.append(
            f"trainer.device=cpu: actor_rollout_ref.rollout.name={config.actor_rollout_ref.rollout.name} has no "
            f"CPU server; the CPU rollout is {LOCAL_ROLLOUT_NAME}"
        )
    return problems


def speech_problems(config: Config) -> list[str]:
    """Why a talker run (``stage=talker``) cannot run on verl as configured.

    On verl the talker speaks what vLLM-Omni's thinker answers (greedy, its production
    sampling), in the checkpoint's default voice, and its rows are padded (the talker's
    fields are per row)."""
    from omni_contracts import OmniContractError, rollout_adapters

    model = config.actor_rollout_ref.model
    rollout = config.actor_rollout_ref.rollout
    problems = []
    try:
        adapter = rollout_adapters.get(rollout.pipeline() or "")()
    except OmniContractError:
        adapter = None  # the pipeline check names the problem
    if adapter is not None and rollout.pipeline_mode in adapter.modes and adapter.policy_stage_id(rollout.pipeline_mode) == 0:
        speech_modes = [m for m in adapter.modes if adapter.policy_stage_id(m) != 0]
        problems.append(
            f"actor_rollout_ref.model.stage=talker samples the talker in vLLM-Omni, but pipeline_mode="
            f"{rollout.pipeline_mode!r} samples stage 0; set actor_rollout_ref.rollout.pipeline_mode to one of "
            f"{', '.join(speech_modes) or '(none: this pipeline has no speech policy mode)'}"
        )
    if model.use_remove_padding:
        problems.append(
            "actor_rollout_ref.model.stage=talker reads per-row fields, which packed rows cannot carry; set "
            "actor_rollout_ref.model.use_remove_padding=false"
        )
    if config.data.spoken_text != "thinker":
        problems.append(
            "actor_rollout_ref.model.stage=talker speaks vLLM-Omni's thinker's own answer on the verl engine "
            "(extra_info.spoken_text is for the local engine); set data.spoken_text=thinker"
        )
    if config.data.max_spoken_tokens != type(config.data)().max_spoken_tokens:
        problems.append(
            "data.max_spoken_tokens applies to the local engine; on verl the thinker answers with vLLM-Omni's "
            "production sampling (greedy, at most 2048 tokens); leave it unset"
        )
    if rollout.speaker is not None:
        problems.append(
            "actor_rollout_ref.rollout.speaker: vLLM-Omni's talker speaks with the checkpoint's default voice "
            "on the verl engine in this version; leave it unset"
        )
    return problems


def _values(
    config: Config, model_path: str, target_modules: list[str] | None, exclude_modules: str | None
) -> dict[str, Any]:
    data, trainer, algorithm = config.data, config.trainer, config.algorithm
    model = config.actor_rollout_ref.model
    actor = config.actor_rollout_ref.actor
    rollout = config.actor_rollout_ref.rollout
    ray_init = config.ray_kwargs.ray_init
    settings = settings_for(config, model_path)
    env_vars = {
        EXTERNAL_MODULES_ENV: EXTERNAL_MODULE,
        SETTINGS_ENV: settings.to_env(),
        **ray_init.runtime_env.env_vars,
    }
    micro = actor.ppo_micro_batch_size_per_gpu
    lora = model.lora_rank > 0
    # fp32 parameters, LoRA or not; FSDP's mixed precision (param_dtype bf16, verl's default)
    # computes in bf16. verl 0.9.1's FSDP engine casts a LoRA adapter to its base's dtype
    # (_build_lora_module; no key keeps them apart: lora.dtype is Megatron's), so a bf16 base
    # would train a bf16 adapter whose 3e-6 AdamW steps round to nothing.
    model_dtype = "fp32"
    values: dict[str, Any] = {
        "data.train_files": list(data.train_files or []),
        "data.val_files": list(data.val_files or data.train_files or []),
        "data.train_batch_size": data.train_batch_size,
        "data.val_batch_size": data.val_batch_size,
        "data.max_prompt_length": data.max_prompt_length,
        "data.max_response_length": data.max_response_length,
        "data.shuffle": data.shuffle,
        "data.seed": data.seed,
        "data.filter_overlong_prompts": True,
        "data.on_bad_row": data.on_bad_row,  # read by our dataset class (counted drops)
        "data.mm_processor_kwargs": dict(data.mm_processor_kwargs),
        "data.custom_cls.path": DATASET_CLASS[0],
        "data.custom_cls.name": DATASET_CLASS[1],
        "actor_rollout_ref.model.path": model_path,
        "actor_rollout_ref.model.model_type": OMNI_MODEL_TYPE,
        "actor_rollout_ref.model.lora_rank": model.lora_rank,
        "actor_rollout_ref.model.lora_alpha": model.lora_alpha,
        # vLLM-Omni's policy stage (Qwen3OmniMoeForConditionalGeneration) cannot serve LoRA:
        # verl merges the adapter and syncs full weights instead.
        "actor_rollout_ref.model.lora.merge": lora,
        "actor_rollout_ref.model.target_modules": list(model.target_modules or target_modules or []) or "all-linear",
        "actor_rollout_ref.model.exclude_modules": model.exclude_modules or exclude_modules,
        "actor_rollout_ref.model.use_remove_padding": model.use_remove_padding,
        # verl asks transformers for flash_attention_2 unless told otherwise; flash-attn 2 is not
        # in the lock (it builds from source), so the FSDP actor would fail to load with it.
        "actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
        "actor_rollout_ref.model.enable_gradient_checkpointing": model.enable_gradient_checkpointing,
        "actor_rollout_ref.actor.strategy": actor.strategy,
        "actor_rollout_ref.actor.fsdp_config.model_dtype": model_dtype,
        "actor_rollout_ref.ref.fsdp_config.model_dtype": model_dtype,
        "actor_rollout_ref.actor.fsdp_config.param_offload": actor.fsdp_config.param_offload,
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": actor.fsdp_config.optimizer_offload,
        "actor_rollout_ref.actor.freeze_vision_tower": model.freeze_vision_tower,
        "actor_rollout_ref.actor.policy_loss.loss_mode": actor.policy_loss.loss_mode,
        "actor_rollout_ref.actor.clip_ratio": actor.clip_ratio,
        "actor_rollout_ref.actor.clip_ratio_low": _or(actor.clip_ratio_low, actor.clip_ratio),
        "actor_rollout_ref.actor.clip_ratio_high": _or(actor.clip_ratio_high, actor.clip_ratio),
        "actor_rollout_ref.actor.clip_ratio_c": actor.clip_ratio_c,
        "actor_rollout_ref.actor.loss_agg_mode": actor.loss_agg_mode,
        # Dr.GRPO's constant: the response limit on both engines (verl's default is the padded
        # width of whatever rows reach its loss, which its V1 trainer does not pad).
        "actor_rollout_ref.actor.loss_scale_factor": actor.loss_scale_factor or data.max_response_length,
        "actor_rollout_ref.actor.ppo_mini_batch_size": actor.ppo_mini_batch_size,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.actor.use_dynamic_bsz": actor.use_dynamic_bsz,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": actor.ppo_max_token_len_per_gpu,
        "actor_rollout_ref.actor.ppo_epochs": actor.ppo_epochs,
        "actor_rollout_ref.actor.use_kl_loss": actor.use_kl_loss,
        "actor_rollout_ref.actor.kl_loss_coef": actor.kl_loss_coef,
        "actor_rollout_ref.actor.kl_loss_type": actor.kl_loss_type,
        "actor_rollout_ref.actor.entropy_coeff": actor.entropy_coeff,
        # verl 0.9.1's FSDP engine clips with optim.clip_grad; actor.grad_clip is read nowhere.
        "actor_rollout_ref.actor.optim.clip_grad": actor.grad_clip,
        "actor_rollout_ref.actor.optim.lr": actor.optim.lr,
        "actor_rollout_ref.actor.optim.weight_decay": actor.optim.weight_decay,
        "actor_rollout_ref.actor.optim.lr_warmup_steps": actor.optim.lr_warmup_steps or -1,
        "actor_rollout_ref.actor.optim.lr_scheduler_type": actor.optim.lr_scheduler_type,
        "actor_rollout_ref.actor.optim.min_lr_ratio": actor.optim.min_lr_ratio,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.rollout.name": rollout.name,
        "actor_rollout_ref.rollout.mode": rollout.mode,
        "actor_rollout_ref.rollout.n": rollout.n,
        "actor_rollout_ref.rollout.temperature": rollout.temperature,
        "actor_rollout_ref.rollout.top_p": rollout.top_p,
        "actor_rollout_ref.rollout.top_k": rollout.top_k,
        "actor_rollout_ref.rollout.val_kwargs.n": rollout.val_kwargs.n,
        "actor_rollout_ref.rollout.val_kwargs.do_sample": rollout.val_kwargs.do_sample,
        "actor_rollout_ref.rollout.val_kwargs.temperature": rollout.val_kwargs.temperature,
        "actor_rollout_ref.rollout.val_kwargs.top_p": rollout.val_kwargs.top_p,
        "actor_rollout_ref.rollout.val_kwargs.top_k": rollout.val_kwargs.top_k,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": rollout.tensor_model_parallel_size,
        "actor_rollout_ref.rollout.gpu_memory_utilization": rollout.gpu_memory_utilization,
        "actor_rollout_ref.rollout.max_num_seqs": rollout.max_num_seqs,
        "actor_rollout_ref.rollout.max_num_batched_tokens": rollout.max_num_batched_tokens,
        "actor_rollout_ref.rollout.cudagraph_capture_sizes": rollout.cudagraph_capture_sizes,
        "actor_rollout_ref.rollout.enforce_eager": rollout.enforce_eager,
        "actor_rollout_ref.rollout.free_cache_engine": rollout.free_cache_engine,
        "actor_rollout_ref.rollout.enable_prefix_caching": rollout.enable_prefix_caching,
        # Sized for this run: left empty, vLLM reserves the model's 65,536-token context and
        # leaves little KV cache at this gpu_memory_utilization.
        "actor_rollout_ref.rollout.max_model_len": data.max_prompt_length + data.max_response_length,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.rollout.agent.default_agent_loop": (
            SPEECH_AGENT_LOOP if model.stage == "talker" else AGENT_LOOPS[rollout.agent.default_agent_loop]
        ),
        "actor_rollout_ref.rollout.agent.agent_loop_manager_class": AGENT_LOOP_MANAGER,
        "actor_rollout_ref.rollout.engine_kwargs.vllm_omni": {
            "pipeline_name": rollout.pipeline(), "pipeline_mode": rollout.pipeline_mode,
        },
        "algorithm.adv_estimator": algorithm.adv_estimator,
        "algorithm.norm_adv_by_std_in_grpo": algorithm.norm_adv_by_std_in_grpo,
        "algorithm.gamma": algorithm.gamma,
        "algorithm.use_kl_in_reward": algorithm.use_kl_in_reward,
        "algorithm.kl_penalty": algorithm.kl_penalty,
        "algorithm.kl_ctrl.kl_coef": algorithm.kl_ctrl.kl_coef,
        "reward.custom_reward_function.path": REWARD_FUNCTION[0],
        "reward.custom_reward_function.name": REWARD_FUNCTION[1],
        "reward.custom_reward_function.reward_kwargs": {
            "num_workers": config.reward.num_workers or SCORER_PROCESSES_PER_REWARD_WORKER,
            "timeout_s": config.reward.timeout_s,
            "on_unknown_data_source": config.reward.on_unknown_data_source,
        },
        # Our total_training_steps bounds the run on its own (epochs repeat, as on the local
        # engine); verl also stops at total_epochs, so give it enough epochs to reach the steps.
        "trainer.total_epochs": (
            trainer.total_epochs if trainer.total_training_steps is None
            else max(trainer.total_epochs, trainer.total_training_steps)
        ),
        "trainer.total_training_steps": trainer.total_training_steps,
        "trainer.save_freq": trainer.save_freq or -1,
        "trainer.test_freq": trainer.test_freq or -1,
        "trainer.val_before_train": trainer.val_before_train,
        "trainer.max_actor_ckpt_to_keep": trainer.max_checkpoints_to_keep,
        "trainer.resume_mode": trainer.resume_mode,
        "trainer.default_local_dir": trainer.default_local_dir,
        "trainer.project_name": trainer.project_name,
        "trainer.experiment_name": trainer.experiment_name,
        # verl's "file" logger too: each launch's metrics as JSON lines in the run directory
        # (the path is set per launch, launch.metrics_file).
        "trainer.logger": list(dict.fromkeys([*trainer.logger, "file"])),
        "trainer.nnodes": trainer.nnodes,
        "trainer.n_gpus_per_node": trainer.n_gpus_per_node,
        "trainer.device": "cuda",
        "ray_kwargs.ray_init.num_cpus": ray_init.num_cpus,
        "ray_kwargs.ray_init.runtime_env.env_vars": env_vars,
        "ray_kwargs.timeline_json_file": config.ray_kwargs.timeline_json_file,
    }
    if ray_init.address is not None:
        values["ray_kwargs.ray_init.address"] = ray_init.address
    if ray_init.num_gpus is not None:
        values["ray_kwargs.ray_init.num_gpus"] = ray_init.num_gpus
    values.update(distillation_values(config))
    if trainer.device == "cpu":
        values.update(cpu_values(config, env_vars))
    return values


CPU_RUN_RAY_CPUS = 64
"""The local Ray's CPU count on a CPU run: scheduling slots for verl's actors (task runner,
TransferQueue, agent-loop, reward and rollout servers, one bundle per rank), not cores."""
FP32_MIXED_PRECISION = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


def cpu_values(config: Config, env_vars: dict[str, str]) -> dict[str, Any]:
    """What ``trainer.device=cpu`` changes: verl's CPU platform in every process, the
    ``omni_local`` rollout, fp32 throughout (the CPU has no fast bf16; the run is the local
    engine's numerics), one agent-loop and one reward worker (each is a process), and on a
    local Ray one logical rank slot per rank (:mod:`cpu_platform`)."""
    trainer, ray_init = config.trainer, config.ray_kwargs.ray_init
    values: dict[str, Any] = {
        "trainer.device": "cpu",
        "actor_rollout_ref.rollout.name": LOCAL_ROLLOUT_NAME,
        # One process per replica: the GPU recipes' tensor parallelism does not apply.
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
        "actor_rollout_ref.actor.fsdp_config.model_dtype": "fp32",
        "actor_rollout_ref.ref.fsdp_config.model_dtype": "fp32",
        "actor_rollout_ref.actor.fsdp_config.mixed_precision": dict(FP32_MIXED_PRECISION),
        "actor_rollout_ref.ref.fsdp_config.mixed_precision": dict(FP32_MIXED_PRECISION),
        "actor_rollout_ref.rollout.agent.num_workers": 1,
        "reward.num_workers": 1,
        "data.dataloader_num_workers": 0,
        "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
        "ray_kwargs.ray_init.runtime_env.env_vars": {**env_vars, CPU_PLATFORM_ENV: "cpu"},
    }
    if ray_init.address is None:
        if ray_init.num_gpus is None:
            values["ray_kwargs.ray_init.num_gpus"] = trainer.nnodes * trainer.n_gpus_per_node
        if ray_init.num_cpus is None:
            # Also logical: verl's actors and placement bundles each hold CPUs, more than a laptop has.
            values["ray_kwargs.ray_init.num_cpus"] = CPU_RUN_RAY_CPUS
    return values


def _or(value: float | None, default: float) -> float:
    return default if value is None else value
