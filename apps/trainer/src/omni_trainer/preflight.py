"""Pre-flight: the whole resolved config, checked before any model, tokenizer or dataset loads.

:func:`preflight` is the one entry point (``trainer`` and ``trainer --print-config`` both run
it). It reports every problem at once as a :class:`~omni_trainer.config.ConfigError` (the CLI
exits with status 2) and returns the warnings. Closed vocabularies are checked against the
live registries (policy losses, advantage estimators, aggregation and KL modes, stages,
rollout pipelines and their modes, agent loops, scorers), so a package that registers a new
name is accepted without editing this file. The checks common to both engines live here;
each engine adds its own (:attr:`omni_trainer.engines.Engine.checks`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omni_trainer.config import DATASET_CLASS_KEYS, Config, ConfigError, uses_embedded_default
from omni_trainer.engines import engine_for
from omni_trainer.findings import Check, Findings, one_line, one_of
from omni_trainer.keys import range_problems
from omni_trainer.files import Checkpoint
from omni_trainer.model_folder import folder_problems
from omni_trainer.reporting import NO_VALIDATION
from omni_trainer.resolved import ResolvedRun
from omni_trainer.settings_builders import correction_settings, distillation_settings
from omni_trainer.tasks import task_of

GROUPED_ESTIMATORS = ("grpo", "grpo_passk", "rloo", "reinforce_plus_plus_baseline")
"""Estimators whose baseline is the prompt's group of ``rollout.n`` samples."""
KNOWN_DATASET_CLASSES = ("QwenOmniRLHFDataset", *DATASET_CLASS_KEYS)
"""verl-omni dataset classes whose job omni-data's dataset already does (media loading; a
video's soundtrack as an audio item: :data:`omni_trainer.config.DATASET_CLASS_KEYS`)."""


def preflight(run: ResolvedRun) -> list[str]:
    """Check ``run`` (its config as a whole, and what its files say); returns the warnings.

    Raises:
        ConfigError: every problem found, one per line, each saying how to fix it.
    """
    findings = Findings()
    for check in (*COMMON_CHECKS, *engine_for(run.config.trainer.engine).checks):
        check(run, findings)
    if findings.problems:
        raise ConfigError("Invalid configuration:\n  - " + "\n  - ".join(findings.problems))
    return findings.warnings


# --- closed vocabularies, against the registries ------------------------------------------------


def _vocabularies(run: ResolvedRun, found: Findings) -> None:
    from omni_contracts import STAGES
    from omni_rollout.agent_loops import AGENT_LOOPS
    from omni_training.aggregation import LOSS_AGG_MODES
    from omni_training.kl import KL_MODES

    config = run.config
    actor = config.actor_rollout_ref.actor
    rollout = config.actor_rollout_ref.rollout
    one_of(found, "actor_rollout_ref.actor.loss_agg_mode", actor.loss_agg_mode, LOSS_AGG_MODES)
    kl_modes = (*KL_MODES, *(f"{mode}+" for mode in KL_MODES))
    one_of(found, "actor_rollout_ref.actor.kl_loss_type", actor.kl_loss_type, kl_modes)
    one_of(found, "algorithm.kl_penalty", config.algorithm.kl_penalty, kl_modes)
    one_of(found, "actor_rollout_ref.model.stage", config.actor_rollout_ref.model.stage, STAGES)
    if config.trainer.talker_drift_rewards:
        if not config.trainer.talker_drift:
            found.problems.append(
                "trainer.talker_drift_rewards score the drift probes' speech; set trainer.talker_drift=true"
            )
        _audio_reward_specs("trainer.talker_drift_rewards", config.trainer.talker_drift_rewards, found)
    if config.actor_rollout_ref.actor.talker_drift_coef and not config.trainer.talker_drift:
        found.problems.append(
            "actor_rollout_ref.actor.talker_drift_coef penalises the drift that trainer.talker_drift "
            "measures; set trainer.talker_drift=true"
        )
    if not task_of(run.task).validates:
        if config.data.val_files:
            found.problems.append(
                "actor_rollout_ref.model.stage=talker runs no validation in this version (its rewards "
                "are reported every step); leave data.val_files unset"
            )
        _audio_rewards(run, found)
    elif config.reward.audio_rewards:
        found.problems.append(
            "reward.audio_rewards score speech, which only actor_rollout_ref.model.stage=talker "
            "produces; set the stage, or leave reward.audio_rewards empty"
        )
    if config.data.spoken_text != "extra_info" and (
        config.actor_rollout_ref.model.stage != "talker" or not config.data.train_files
    ):
        found.problems.append(
            f"data.spoken_text={config.data.spoken_text} chooses what a talker run's rows speak; it needs "
            "actor_rollout_ref.model.stage=talker and data.train_files"
        )
    one_of(found, "actor_rollout_ref.rollout.agent.default_agent_loop", rollout.agent.default_agent_loop,
            tuple(AGENT_LOOPS))
    _pipeline(run, found)


def _audio_rewards(run: ResolvedRun, found: Findings) -> None:
    """A speech stage is paid by ``reward.audio_rewards``: present, and specs that build."""
    from omni_rewards.audio import AUDIO_SCORERS

    config = run.config
    specs = config.reward.audio_rewards
    if not specs:
        found.problems.append(
            "actor_rollout_ref.model.stage=talker needs reward.audio_rewards, e.g. "
            f"[{{name: duration, weight: 1.0}}]; rewards: {', '.join(AUDIO_SCORERS.names())} "
            "('http', with a url, reaches your own scorer: ASR, speaker similarity)"
        )
        return
    _audio_reward_specs("reward.audio_rewards", specs, found)


def _audio_reward_specs(key: str, specs: list[dict[str, Any]], found: Findings) -> None:
    from omni_rewards.audio import WeightedAudioReward
    from omni_rewards.errors import AudioRewardConfigError

    try:
        WeightedAudioReward(specs).close()
    except AudioRewardConfigError as exc:
        found.problems.append(f"{key}: {one_line(exc)}")


def _pipeline(run: ResolvedRun, found: Findings) -> None:
    from omni_contracts import OmniContractError, rollout_adapters

    config = run.config
    rollout = config.actor_rollout_ref.rollout
    if rollout.pipeline_name is None:
        found.problems.append(
            "actor_rollout_ref.rollout.pipeline_name is unset and could not be taken from the model "
            f"(actor_rollout_ref.model.path={config.actor_rollout_ref.model.path}); set it, or fix the model path"
        )
        return
    try:
        adapter_cls = rollout_adapters.get(rollout.pipeline_name)
    except OmniContractError as exc:
        found.problems.append(f"actor_rollout_ref.rollout.pipeline_name={rollout.pipeline_name!r}: {one_line(exc)}")
        return
    one_of(found, "actor_rollout_ref.rollout.pipeline_mode", rollout.pipeline_mode, adapter_cls.modes)
    if rollout.pipeline_mode in adapter_cls.modes and config.actor_rollout_ref.model.stage == "thinker":
        policy = adapter_cls().policy_stage_id(rollout.pipeline_mode)
        if policy != 0:
            thinker_modes = [m for m in adapter_cls.modes if adapter_cls().policy_stage_id(m) == 0]
            found.problems.append(
                f"actor_rollout_ref.rollout.pipeline_mode={rollout.pipeline_mode!r} samples stage {policy} as the "
                f"policy, but actor_rollout_ref.model.stage=thinker trains stage 0; use one of {', '.join(thinker_modes)}"
            )


def _distillation(run: ResolvedRun, found: Findings) -> None:
    config = run.config
    if not config.distillation.enabled:
        return
    from omni_training.distillation import DistillationConfigError

    try:
        distillation_settings(config)
    except DistillationConfigError as exc:
        found.problems.append(f"distillation.distillation_loss: {one_line(exc)}")


def _rollout_correction(run: ResolvedRun, found: Findings) -> None:
    """``algorithm.rollout_correction``'s modes and thresholds parse, and it has samples to
    correct: an offline run trains on fixed pairs, with no rollout log-probs."""
    config = run.config
    try:
        settings = correction_settings(config)
    except ValueError as exc:
        found.problems.append(f"algorithm.rollout_correction: {one_line(exc)}")
        return
    if config.algorithm.sample_source == "offline" and (settings.corrects or settings.bypass_mode):
        found.problems.append(
            "algorithm.rollout_correction: an offline run (algorithm.sample_source=offline) has no rollout to "
            "correct; leave rollout_is and rollout_rs null and bypass_mode=false"
        )


def _async_training(run: ResolvedRun, found: Findings) -> None:
    """Asynchronous rollout: the local engine's text RL, on the rollout's own log-probs."""
    config = run.config
    staleness = config.async_training.max_staleness
    if staleness < 0:
        found.problems.append(f"async_training.max_staleness={staleness} must be >= 0 (0: synchronous)")
    if staleness <= 0:
        return
    if not task_of(run.task).samples_ahead:
        found.problems.append(
            f"async_training.max_staleness={staleness}: asynchronous rollout runs RL on text in this version "
            f"(this run is {run.task}); set async_training.max_staleness=0"
        )
    if not config.algorithm.rollout_correction.bypass_mode:
        found.problems.append(
            f"async_training.max_staleness={staleness} trains on samples of older policy versions, whose old "
            "log-probs are the rollout's own: set algorithm.rollout_correction.bypass_mode=true (as verl's "
            "one-step-off recipe does), with rollout_is / rollout_rs to correct the lag"
        )


# --- value ranges and cross-field rules ---------------------------------------------------------


def _ranges(run: ResolvedRun, found: Findings) -> None:
    config = run.config
    data = config.data
    actor = config.actor_rollout_ref.actor
    model = config.actor_rollout_ref.model
    if model.target_parameters and model.lora_rank > 0 and model.lora_dropout:
        found.problems.append(
            f"actor_rollout_ref.model.lora_dropout={model.lora_dropout} with target_parameters: PEFT's LoRA on "
            "parameters (the experts' fused weights) takes no dropout; set actor_rollout_ref.model.lora_dropout=0"
        )
    found.problems.extend(range_problems(config))  # the declared ranges (omni_trainer.keys)
    # data.train_batch_size=0 is each engine's to refuse: verl's fully-async trainer takes it.
    if 1 <= actor.ppo_mini_batch_size and 1 <= data.train_batch_size:
        if actor.ppo_mini_batch_size > data.train_batch_size:
            found.problems.append(
                f"actor_rollout_ref.actor.ppo_mini_batch_size={actor.ppo_mini_batch_size} exceeds "
                f"data.train_batch_size={data.train_batch_size} (both count prompts)"
            )
        elif data.train_batch_size % actor.ppo_mini_batch_size:
            found.problems.append(
                f"data.train_batch_size={data.train_batch_size} is not a multiple of "
                f"actor_rollout_ref.actor.ppo_mini_batch_size={actor.ppo_mini_batch_size}; every "
                "optimizer step must see the same number of prompts (verl requires it too)"
            )
    if uses_embedded_default(config) or config.data.train_files is None:
        if data.builtin_task_size >= 1 and data.train_batch_size > data.builtin_task_size:
            found.problems.append(
                f"data.train_batch_size={data.train_batch_size} exceeds the built-in task's "
                f"data.builtin_task_size={data.builtin_task_size} prompts"
            )


def _warnings(run: ResolvedRun, found: Findings) -> None:
    config = run.config
    rollout = config.actor_rollout_ref.rollout
    if rollout.n == 1 and config.algorithm.adv_estimator in GROUPED_ESTIMATORS:
        found.warnings.append(
            f"actor_rollout_ref.rollout.n=1 with algorithm.adv_estimator={config.algorithm.adv_estimator}: "
            "each group holds one sample, so every advantage is 0 and nothing is learned; use n >= 2"
        )
    if rollout.temperature == 0 and rollout.n > 1:
        found.warnings.append(
            f"actor_rollout_ref.rollout.temperature=0 with n={rollout.n}: greedy decoding gives the "
            "same response n times, so group advantages are 0; use a temperature > 0"
        )
    val = rollout.val_kwargs
    if val.do_sample and val.temperature == 0:
        found.warnings.append(
            "actor_rollout_ref.rollout.val_kwargs.do_sample=true with temperature=0 is greedy; "
            "set val_kwargs.temperature > 0 to sample"
        )
    if config.data.train_files and not config.data.val_files and config.actor_rollout_ref.model.stage != "talker":
        found.warnings.append(
            f"{NO_VALIDATION} (the training rows are not scored as validation); set data.val_files, e.g. "
            "the test or validation split `trainer convert` wrote"
        )
    if config.trainer.log_val_generations > 0 and (
        not task_of(run.task).validates or (config.data.train_files and not config.data.val_files)
    ):
        found.warnings.append(
            f"trainer.log_val_generations={config.trainer.log_val_generations} logs validation samples, and this "
            "run validates nothing (no data.val_files, or stage=talker): none are logged"
        )


# --- files, directories and what they hold ------------------------------------------------------


def _model_paths(run: ResolvedRun, found: Findings) -> None:
    from omni_contracts import OmniContractError
    config = run.config
    stage = run.stage
    models = [("actor_rollout_ref.model.path", run.model, run.training_adapter)]
    if run.teacher is not None:  # load_config reports a missing teacher
        models.append(("distillation.teacher_models.teacher_model.model_path", run.teacher, run.teacher_adapter))
    for key, model, adapter_of in models:
        if model is None or not _readable_checkpoint(key, model, found):
            continue
        assert model.config is not None
        found.problems.extend(folder_problems(key, model.path))  # tokenizer, chat template, weights
        try:
            adapter = adapter_of()
        except OmniContractError as exc:
            found.problems.append(f"{key}={model.path} (stage {stage!r}): {one_line(exc)}")
            continue
        found.problems.extend(
            f"{key}={model.path}: {problem}"
            for problem in adapter.checkpoint_problems(str(Path(model.path).expanduser()), model.config)
        )
        pipeline = config.actor_rollout_ref.rollout.pipeline_name
        if key == "actor_rollout_ref.model.path" and adapter.rollout_pipeline not in (None, pipeline):
            architecture = (model.config.get("architectures") or ["?"])[0]
            found.problems.append(
                f"actor_rollout_ref.rollout.pipeline_name={pipeline!r} does not generate with {architecture} "
                f"(its package, {type(adapter).__module__.split('.')[0]}, declares {adapter.rollout_pipeline!r}); "
                f"set actor_rollout_ref.rollout.pipeline_name={adapter.rollout_pipeline}"
            )


def _readable_checkpoint(key: str, model: Checkpoint, found: Findings) -> bool:
    if model.problem is not None:
        found.problems.append(f"{key}={model.path} {model.problem}" if model.problem.startswith(("is not", "has no"))
                              else f"{key}={model.path}: {model.problem}")
    return model.config is not None


def _data_files(run: ResolvedRun, found: Findings) -> None:
    """Train/val files exist and are parquet; their data sources have scorers; the train
    files hold at least one batch."""
    config = run.config
    sources: dict[str, str] = {}
    train_rows = 0
    unreadable = len(found.problems)
    for key, files in (("data.train_files", run.train_files), ("data.val_files", run.val_files)):
        for file in files:
            if file.problem is not None:
                found.problems.append(f"{key}: {file.problem}")
            if key == "data.train_files":
                train_rows += file.rows
            for source in file.data_sources:
                sources.setdefault(source, file.path)
    readable = len(found.problems) == unreadable
    if run.train_files and readable and train_rows < config.data.train_batch_size:
        found.problems.append(
            f"data.train_batch_size={config.data.train_batch_size} exceeds the {train_rows} rows of "
            "data.train_files; lower it or add data"
        )
    if config.reward.custom_reward_function.path or config.reward.on_unknown_data_source == "skip":
        return
    if not task_of(run.task).scored_by_data_source:
        return  # speech is scored by reward.audio_rewards; preference pairs by nothing
    from omni_rewards import SCORERS

    missing = {source: path for source, path in sources.items() if source not in SCORERS}
    for source, path in sorted(missing.items()):
        found.problems.append(
            f"data_source {source!r} (in {path}) has no registered scorer; registered: "
            f"{', '.join(sorted(SCORERS.keys()))}. Point reward.custom_reward_function.path at your "
            "scorer, register one with omni_rewards.SCORERS, or set reward.on_unknown_data_source=skip"
        )


def _custom_reward_function(run: ResolvedRun, found: Findings) -> None:
    config = run.config
    custom = config.reward.custom_reward_function
    if not custom.path:
        return
    from omni_rewards.reward_file import CustomRewardError, load_reward_function

    try:
        load_reward_function(custom.path, custom.name)
    except CustomRewardError as exc:
        found.problems.append(f"reward.custom_reward_function: {exc}")


def _judge(run: ResolvedRun, found: Findings) -> None:
    """``reward.reward_model``: a judge folder that loads, and a reward function that asks it
    (verl's generative reward model needs one; the built-in scorers ask no judge)."""
    judge = run.config.reward.reward_model
    if not judge.enable:
        return
    key = "reward.reward_model.model_path"
    if not judge.model_path:
        found.problems.append(f"reward.reward_model.enable=true needs {key}, the judge checkpoint")
    elif not (Path(judge.model_path).expanduser() / "config.json").is_file():
        found.problems.append(
            f"{key}={judge.model_path} is not a checkpoint directory (no config.json). Point it at a local Hugging "
            "Face checkpoint (download one with `hf download <org>/<name> --local-dir <dir>`; `uv run trainer "
            "tiny-judge` builds a tiny one)")
    else:
        found.problems.extend(folder_problems(key, judge.model_path))
    if not run.config.reward.custom_reward_function.path:
        found.problems.append(
            "reward.reward_model.enable=true: the judge is asked by your reward function (it gets "
            "reward_router_address and reward_model_tokenizer); set reward.custom_reward_function.path "
            "(omni_rewards.judge asks a judge in a few lines)")
    if not task_of(run.task).scored_by_data_source:
        found.problems.append(f"reward.reward_model.enable=true: the {run.task} task is not scored by a reward "
                              "function; drop the judge")


def _run_dir(run: ResolvedRun, found: Findings) -> None:
    """The run directory can be created and written."""
    config = run.config
    run_dir = Path(config.trainer.default_local_dir).expanduser()
    existing = run_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        found.problems.append(f"trainer.default_local_dir={run_dir}: {existing} is a file, not a directory")
    elif not os.access(existing, os.W_OK | os.X_OK):
        found.problems.append(f"trainer.default_local_dir={run_dir}: {existing} is not writable")


def _verl_omni_keys(run: ResolvedRun, found: Findings) -> None:
    """verl-omni keys whose job omni-rl does its own way, on both engines: its dataset class
    (omni-data's dataset is the one, under verl too) and a hand-written deploy file."""
    config = run.config
    custom_cls = config.data.custom_cls
    if custom_cls.path or custom_cls.name:
        if custom_cls.name in KNOWN_DATASET_CLASSES:
            implied = ", ".join(f"{key}={value}" for key, value in DATASET_CLASS_KEYS.get(custom_cls.name, {}).items())
            found.warnings.append(
                f"data.custom_cls.name={custom_cls.name} is not needed: omni-data's dataset loads "
                "images, audios and videos itself (the override is ignored"
                + (f"; its job is {implied}, which it sets)" if implied else ")")
            )
        else:
            found.problems.append(
                f"data.custom_cls ({custom_cls.path}:{custom_cls.name}) is a verl dataset class; this trainer "
                "reads RL parquet through omni_data.RLDataset. Convert the data with `uv run trainer convert` "
                "(or write the RL parquet columns) and drop data.custom_cls"
            )
    stage_configs = config.actor_rollout_ref.rollout.engine_kwargs.vllm_omni.stage_configs_path
    if stage_configs is not None:
        found.problems.append(
            f"actor_rollout_ref.rollout.engine_kwargs.vllm_omni.stage_configs_path={stage_configs}: a hand-written "
            "vLLM-Omni deploy file (verl-omni's deprecated launchers). The rollout's deploy config is generated from "
            "actor_rollout_ref.rollout.pipeline_name, with the weight sync and sleep settings the run needs (as "
            "verl-omni's V1 launchers do); drop it and size the rollout with the rollout keys"
        )


def _resume_keys(run: ResolvedRun, found: Findings) -> None:
    """``trainer.resume_from_path`` goes with ``trainer.resume_mode=resume_path`` (verl's meaning)."""
    config = run.config
    trainer = config.trainer
    if trainer.resume_mode == "resume_path" and not trainer.resume_from_path:
        found.problems.append(
            "trainer.resume_mode=resume_path needs trainer.resume_from_path (local engine: a run's "
            "checkpoints/step_<N> directory; verl: a global_step_<N> folder)"
        )
    if trainer.resume_from_path and trainer.resume_mode != "resume_path":
        found.problems.append(
            f"trainer.resume_from_path={trainer.resume_from_path} is read only with trainer.resume_mode=resume_path "
            f"(this run has resume_mode={trainer.resume_mode}); add trainer.resume_mode=resume_path, or drop it"
        )


def _preference(run: ResolvedRun, found: Findings) -> None:
    """Offline preference runs (``algorithm.sample_source=offline``): verl-omni's keys, with
    their meanings, and a loss this workspace registers."""
    config = run.config
    algorithm = config.algorithm
    one_of(found, "algorithm.sample_source", algorithm.sample_source, ("online", "offline"))
    one_of(found, "algorithm.trainer_type", algorithm.trainer_type, ("policy_gradient", "direct_preference"))
    offline = algorithm.sample_source == "offline"
    if not offline:
        if algorithm.trainer_type == "direct_preference" or algorithm.paired_preference:
            found.problems.append(
                "algorithm.trainer_type=direct_preference and algorithm.paired_preference=true train on "
                "preference pairs, which need algorithm.sample_source=offline"
            )
        return
    if algorithm.trainer_type != "direct_preference" and "algorithm.trainer_type" in config.given_keys:
        found.problems.append(
            "algorithm.sample_source=offline trains on preference pairs: set algorithm.trainer_type=direct_preference "
            "(or leave it unset)"
        )
    if "algorithm.paired_preference" in config.given_keys and not algorithm.paired_preference:
        found.problems.append(
            "algorithm.paired_preference=false: offline preference rows are always pairs (chosen, rejected); "
            "set it to true or leave it unset"
        )
    from omni_training.preference import PREFERENCE_LOSSES

    loss = config.actor_rollout_ref.actor.omni_loss
    one_of(found, "actor_rollout_ref.actor.omni_loss.loss_mode", loss.loss_mode, ("dpo",))
    one_of(found, "actor_rollout_ref.actor.omni_loss.loss_type", loss.loss_type, tuple(PREFERENCE_LOSSES))
    if loss.beta <= 0:
        found.problems.append(f"actor_rollout_ref.actor.omni_loss.beta={loss.beta} must be positive")
    if not 0 <= loss.label_smoothing < 0.5:
        found.problems.append(
            f"actor_rollout_ref.actor.omni_loss.label_smoothing={loss.label_smoothing} must be in [0, 0.5)"
        )
    for key, sampler in (("data.train_sampler", config.data.train_sampler), ("data.val_sampler", config.data.val_sampler)):
        if sampler.class_name not in (None, "ModalityGroupedBatchSampler"):
            found.problems.append(
                f"{key}.class_name={sampler.class_name}: offline preference runs batch with verl-omni's "
                "ModalityGroupedBatchSampler (one modality per batch); leave it unset or name that class"
            )
    if config.data.train_sampler.sampler_kwargs.get("replacement", True) is not True:
        found.problems.append(
            "data.train_sampler.sampler_kwargs.replacement=false: training pairs are drawn with replacement, one "
            "modality a batch (verl-omni's training sampler); sequential batches are validation's"
        )
    given = config.data.train_sampler.sampler_kwargs.get("batch_size")
    if given is not None and given != config.data.train_batch_size:
        found.problems.append(
            f"data.train_sampler.sampler_kwargs.batch_size={given} differs from data.train_batch_size="
            f"{config.data.train_batch_size} (pairs per step); give both the same value"
        )
    if config.actor_rollout_ref.model.stage == "talker":
        found.problems.append("algorithm.sample_source=offline trains the thinker; set actor_rollout_ref.model.stage=thinker")
    if config.actor_rollout_ref.actor.ppo_epochs != 1:
        found.problems.append(
            f"actor_rollout_ref.actor.ppo_epochs={config.actor_rollout_ref.actor.ppo_epochs}: an offline preference step "
            "passes over its pairs once (verl-omni's default); leave it at 1 and raise trainer.total_training_steps instead"
        )
    if config.data.truncation not in (None, "error", "left", "right"):
        found.problems.append(
            f"data.truncation={config.data.truncation}: a preference answer longer than data.max_response_length is "
            "cut keeping its start (unset or right), keeping its end (left), or refused (error)"
        )


def _reward_error_rate(run: ResolvedRun, found: Findings) -> None:
    config = run.config
    rate = config.reward.max_error_rate
    if not 0 <= rate <= 1:
        found.problems.append(
            f"reward.max_error_rate={rate} must be in [0, 1]: the share of a step's samples whose scorer may fail "
            "before the run stops (1.0: never stop)"
        )


def _audio_in_video(run: ResolvedRun, found: Findings) -> None:
    """Soundtracks reach the thinker's RL and distillation prompts; the talker's prompts and the
    preference pairs do not take them yet (a silent drop is refused)."""
    data = run.config.data
    if data.use_audio_in_video and data.soundtrack_as_audio:
        found.problems.append(
            "data.use_audio_in_video and data.soundtrack_as_audio both hear a video's soundtrack (interleaved with its "
            "frames, or as an audio item of its own after them); set one of them"
        )
    task = task_of(run.task)
    for switch in ("use_audio_in_video", "soundtrack_as_audio"):
        if getattr(data, switch) and not task.hears_soundtracks:
            found.problems.append(
                f"data.{switch}=true: {task.said_by} does not take the videos' soundtracks yet (RL and on-policy "
                "distillation of the thinker do); turn it off, or train the thinker online"
            )


COMMON_CHECKS: tuple[Check, ...] = (
    _vocabularies, _distillation, _rollout_correction, _async_training, _ranges, _warnings, _model_paths, _data_files, _custom_reward_function, _judge, _run_dir,
    _verl_omni_keys, _resume_keys, _reward_error_rate, _preference, _audio_in_video,
)
