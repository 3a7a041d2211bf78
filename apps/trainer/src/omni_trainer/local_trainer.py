"""The local engine: set up the run's components, then the run loop (resume, Ctrl-C, saving).

Wires the packages through their public APIs: the adapters come from the registry (the
checkpoint's ``architectures[0]`` and ``actor_rollout_ref.model.stage``), the actor from
omni-training, the engine and agent loop from omni-rollout, the scores from omni-rewards.
One step's phases are in :mod:`omni_trainer.step`; how the run starts in its directory is
in :mod:`omni_trainer.run_dir`; what it prints in :mod:`omni_trainer.reporting`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from omni_contracts import (
    LogitMask,
    TalkerDriftProbe,
    get_rollout_adapter,
    require_omni_processor,
    resolve_training_adapter,
)
from omni_rewards import SCORERS, RewardManager, ScorerRegistry
from omni_rewards.audio import SpeechSample, WeightedAudioReward
from omni_rollout.agent_loops import get_agent_loop
from omni_rollout.local_engine import LocalEngine, find_policy_module
from omni_rollout.sampling import SamplingSettings
from omni_trainer import builtin_task, speech_task
from omni_trainer.builtin_files import BUILTIN_VALIDATION_ROWS
from omni_trainer.config import Config, ConfigError
from omni_trainer.interrupts import StopRequest, workers_ignore_sigint
from omni_trainer.loggers import build_sinks
from omni_trainer.model_folder import require_usable_tokenizer
from omni_trainer.placeholders import policy_logit_mask
from omni_trainer.preflight import distillation_settings
from omni_trainer.prompts import (
    BuiltinPrompts,
    DatasetPrompts,
    Prepared,
    PromptSource,
    SpokenPrompts,
    encode_builtin,
    with_spoken_text,
)
from omni_trainer.reporting import DROPPED_KEY, complete_message, report_step, validation_line, write_summary
from omni_trainer.resume_check import data_fingerprint, record_run
from omni_trainer.reward_guard import RewardFailureError
from omni_trainer.run_dir import MetricsLog, RunStart, prepare_run_dir, run_identity
from omni_trainer.settings_builders import (
    actor_settings,
    adapter_options,
    local_device,
    lora_settings,
    model_dtype,
    optim_settings,
    reward_manager_config,
    validation_sampling,
)
from omni_trainer.speech_step import SpeechParts, speech_policy, write_speech_samples
from omni_trainer.step import StepDiscarded, StepParts, train_step
from omni_trainer.val_generations import ValGeneration, ValGenerationsLog
from omni_training.actor import Actor, Regularizer
from omni_training.logit_mask import mask_policy_logits, masked_ids
from omni_training.checkpoint import load_checkpoint, save_checkpoint
from omni_training.distillation import DistillationSettings, Teacher, check_shared_tokenizer


class LocalTrainer:
    """``LocalTrainer(config).setup()`` loads; ``fit()`` trains, resuming as ``start`` says.

    Args:
        config: the resolved config (checked by ``omni_trainer.preflight``).
        start: how the run starts in its directory; default: :func:`prepare_run_dir`.
        stop: the run's Ctrl-C flag (the CLI installs it before start-up); default: a new one,
            installed by :meth:`fit`.
    """

    def __init__(self, config: Config, start: RunStart | None = None, stop: StopRequest | None = None) -> None:
        self.config = config
        self.stop = stop if stop is not None else StopRequest()
        self.start = start if start is not None else prepare_run_dir(config)
        self.run_dir = self.start.run_dir
        for note in self.start.notes:
            print(note)
        self.complete = False
        self.generations: ValGenerationsLog | None = None  # trainer.log_val_generations, set by fit
        torch.manual_seed(config.trainer.seed)
        random.seed(config.trainer.seed)

    # --- setup ------------------------------------------------------------------------------

    def setup(self) -> None:
        from transformers import AutoConfig

        cfg = self.config
        model_path = cfg.actor_rollout_ref.model.path
        if model_path is None:
            from omni_qwen3.tiny import build_tiny_qwen3_omni

            model_path = str(build_tiny_qwen3_omni())
            print(f"model: tiny Qwen3-Omni built offline at {model_path}")
        self.model_path = model_path
        hf_config = AutoConfig.from_pretrained(model_path)
        self.hf_config = hf_config
        stage = cfg.actor_rollout_ref.model.stage
        self.speaks = stage == "talker"  # the trained stage outputs speech: the built-in speech task
        self.training_adapter = resolve_training_adapter(hf_config, stage, adapter_options(cfg))
        self.rollout_adapter = get_rollout_adapter(cfg.actor_rollout_ref.rollout.pipeline())
        self.mode = cfg.actor_rollout_ref.rollout.pipeline_mode
        self.rollout_adapter.check_mode(self.mode)
        self.processor = self.training_adapter.configure_processor(model_path, hf_config)
        require_omni_processor(self.processor, self.training_adapter)
        self.tokenizer = self.training_adapter.configure_tokenizer(model_path, hf_config)
        require_usable_tokenizer(self.tokenizer, model_path)
        self.train_rows, self.val_rows = self._load_rows()
        self.total_steps = self._total_steps()
        if self.start.start_step >= self.total_steps:
            self.complete = True  # nothing to train: the weights need not load
            return
        distillation = self._check_distillation()
        self.device = local_device(cfg)
        if self.device != "cpu":
            self._print_gpu_plan(hf_config)
        self.actor = Actor.from_pretrained(
            model_path, self.training_adapter,
            settings=actor_settings(cfg, distillation, device=self.device), lora=lora_settings(cfg),
            optim=optim_settings(cfg, self.total_steps),
        )
        self.teacher: Teacher | None = self._load_teacher() if distillation is not None else None
        if not self.speaks:  # a speech policy masks its own control ids in its forward
            self.actor.mask_logits(self._logit_mask(self.mode))
        self.engine: LocalEngine | None = None
        self.speech: SpeechParts | None = None
        self._answers: LocalEngine | None = None  # data.spoken_text=thinker: the thinker's answers
        if self.speaks:
            self.speech = SpeechParts(
                speech_policy(self.actor.model, cfg.actor_rollout_ref.rollout.speaker),
                WeightedAudioReward(cfg.reward.audio_rewards), speaker=cfg.actor_rollout_ref.rollout.speaker,
            )
        else:
            self.engine = self._text_engine(self.mode, stage_id=self.rollout_adapter.policy_stage_id(self.mode))
        self.drift: TalkerDriftProbe | None = None
        if cfg.trainer.talker_drift:
            self.drift = self.training_adapter.talker_drift_probe(model_path, hf_config)
            if self.drift is None:
                raise ConfigError(
                    f"Invalid configuration:\n  - trainer.talker_drift=true needs a checkpoint that speaks; "
                    f"{type(self.training_adapter).__name__} has no talker drift probe for {model_path}"
                )
        self.probe_rewards: WeightedAudioReward | None = None
        if self.drift is not None and cfg.trainer.talker_drift_rewards:
            self.probe_rewards = WeightedAudioReward(cfg.trainer.talker_drift_rewards)
        if self.drift is not None and cfg.actor_rollout_ref.actor.talker_drift_coef:
            self.actor.regularizers.append(
                Regularizer("talker_drift_penalty", cfg.actor_rollout_ref.actor.talker_drift_coef, self.drift.penalty)
            )
        self.agent_loop = get_agent_loop(cfg.actor_rollout_ref.rollout.agent.default_agent_loop)
        self.rewards = RewardManager(reward_manager_config(cfg), registry=self._scorers())
        self.parts = StepParts(
            cfg, self.engine, self.agent_loop, self.rollout_adapter, self.mode, self.training_adapter,
            self.tokenizer, self.rewards, self.actor, self.teacher, self.speech,
        )

    def _print_gpu_plan(self, hf_config: Any) -> None:
        """What the run needs on the GPU against what it has, before the weights load."""
        from omni_trainer.gpu_plan import run_plan, visible_gpu

        cfg = self.config
        plan = run_plan(cfg, self.model_path, hf_config, self.training_adapter, visible_gpu())
        print(plan.text)
        print(f"device: {self.device}, {model_dtype(cfg, self.device)}, gradient checkpointing "
              f"{'on' if cfg.actor_rollout_ref.model.enable_gradient_checkpointing else 'off'}", flush=True)

    def _scorers(self) -> ScorerRegistry:
        custom = self.config.reward.custom_reward_function
        if custom.path:
            from omni_trainer.custom_reward import custom_registry

            return custom_registry(custom.path, custom.name, self._data_sources(), custom.reward_kwargs)
        builtin_task.register_scorer()
        return SCORERS

    def _data_sources(self) -> set[str]:
        files = [*(self.config.data.train_files or []), *(self.config.data.val_files or [])]
        if not files:
            return {builtin_task.DATA_SOURCE}
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        return {s for f in files for s in pq.read_table(f, columns=["data_source"]).column(0).to_pylist()}

    def _check_distillation(self) -> DistillationSettings | None:
        """The distillation settings, after checking the teacher shares the student's tokenizer
        (before any weights are loaded)."""
        cfg = self.config.distillation
        if not cfg.enabled:
            return None
        settings: DistillationSettings = distillation_settings(self.config)  # checked by the pre-flight
        teacher_path = cfg.teacher_models.teacher_model.model_path
        assert teacher_path is not None  # checked with the config
        from transformers import AutoConfig

        teacher_config = AutoConfig.from_pretrained(teacher_path)
        self.teacher_adapter = resolve_training_adapter(
            teacher_config, self.config.actor_rollout_ref.model.stage, adapter_options(self.config)
        )
        teacher_tokenizer = self.teacher_adapter.configure_tokenizer(teacher_path, teacher_config)
        check_shared_tokenizer(self.tokenizer, teacher_tokenizer)
        return settings

    def _load_teacher(self) -> Teacher:
        cfg = self.config
        teacher = cfg.distillation.teacher_models.teacher_model
        assert teacher.model_path is not None
        device = next(self.actor.model.parameters()).device
        loaded = Teacher.from_pretrained(
            teacher.model_path, self.teacher_adapter, dtype=model_dtype(cfg, self.device),
            device=device, offload=teacher.param_offload,
        )
        # The teacher scores the student's samples under the mask they were sampled with
        # (its mass on ids no sample can hold would add log(1 - P(masked)) to every token).
        mask_policy_logits(loaded.model, self._logit_mask(self.mode))
        print(f"teacher: {teacher.model_path} (frozen, {'offloaded to CPU' if teacher.param_offload else 'resident'})")
        return loaded

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

    def _load_rows(self) -> tuple[PromptSource, list[Prepared]]:
        cfg = self.config
        if self.speaks:  # no validation: the pre-flight refused val files for this stage
            if cfg.data.train_files is None:
                rows = speech_task.speech_rows(cfg.data.builtin_task_size, seed=cfg.data.seed)
                return BuiltinPrompts(rows, self._encode_speech), []
            if cfg.data.spoken_text == "thinker":
                answers = DatasetPrompts(cfg.data.train_files, self.processor, cfg, require_ground_truth=False)
                return SpokenPrompts(answers, self.tokenizer, self._thinker_answer), []
            spoken = DatasetPrompts(cfg.data.train_files, self.processor, cfg, required_extra_info=("spoken_text",),
                                    require_ground_truth=False)
            return SpokenPrompts(spoken, self.tokenizer, lambda p: (p.extra_info or {})["spoken_text"]), []
        if cfg.data.train_files is None:
            train = builtin_task.builtin_rows(cfg.data.builtin_task_size, seed=cfg.data.seed)
            val = builtin_task.builtin_rows(BUILTIN_VALIDATION_ROWS, seed=cfg.data.seed + 1)
            return BuiltinPrompts(train, self._encode), [self._encode(row) for row in val]
        train_rows = DatasetPrompts(cfg.data.train_files, self.processor, cfg)
        if not cfg.data.val_files:  # never the training rows scored as val-core/* (the pre-flight says so)
            return train_rows, []
        val_source = DatasetPrompts(cfg.data.val_files, self.processor, cfg)
        return train_rows, [val_source[i] for i in range(min(len(val_source), cfg.data.val_batch_size))]

    def _encode(self, row: dict[str, Any]) -> Prepared:
        return encode_builtin(self.processor, row, self.config.data.max_prompt_length)

    def _text_engine(self, mode: str, *, stage_id: int = 0, also_suppressed: tuple[int, ...] = ()) -> LocalEngine:
        """A local engine over ``mode``'s policy stage, ending at the tokenizer's end of turn and
        never sampling a media placeholder (nor ``also_suppressed``)."""
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        module = find_policy_module(self.actor.model, self.rollout_adapter, mode)
        width = int(module.get_output_embeddings().weight.shape[0])
        return LocalEngine(
            module, eos_token_ids=(eos,), pad_token_id=pad, stage_id=stage_id,
            suppress_token_ids=(*masked_ids(self._logit_mask(mode), width), *also_suppressed),
            autocast_dtype=self.actor.autocast_dtype,  # the actor's compute dtype (full fine-tune: bf16 on fp32)
        )

    def _logit_mask(self, mode: str) -> LogitMask:
        """What ``mode``'s policy stage never samples: the media placeholders, and the output
        head's tail past the tokenizer (both engines' rollouts and the actor mask it)."""
        return policy_logit_mask(self.rollout_adapter, mode, self.hf_config, self.processor, self.tokenizer)

    def _thinker_answer(self, prepared: Prepared) -> str:
        """The frozen thinker's greedy answer to ``prepared`` (``data.spoken_text=thinker``).

        Raises:
            ValueError: the answer is empty: there is nothing to speak.
        """
        if self._answers is None:
            turn = self.tokenizer.convert_tokens_to_ids("<|im_start|>")  # a new turn would end the answer's
            self._answers = self._text_engine("thinker_only", also_suppressed=(turn,))
        greedy = SamplingSettings(n=1, temperature=0.0, max_new_tokens=self.config.data.max_spoken_tokens)
        (rollout,) = self._answers.generate([prepared.inputs], greedy)
        text = self.tokenizer.decode(rollout.outputs[0].token_ids, skip_special_tokens=True).strip()
        if not text:
            raise ValueError(
                f"The thinker's greedy answer to prompt {prepared.index} is empty: nothing to speak. Give the rows "
                "extra_info.spoken_text and set data.spoken_text=extra_info."
            )
        return text

    def _encode_speech(self, row: dict[str, Any]) -> Prepared:
        """The prompt, then the assistant turn holding the text to speak (no end of turn)."""
        prepared = encode_builtin(self.processor, row, self.config.data.max_prompt_length)
        return with_spoken_text(prepared, row["spoken_text"], self.tokenizer)

    # --- the loop -----------------------------------------------------------------------------

    def batches(self, start_step: int) -> Iterator[tuple[int, list[Prepared]]]:
        """``(step, prompts)`` after ``start_step``; the order depends only on the seed and the
        step, so a resumed run sees the prompts the uninterrupted one would have."""
        cfg = self.config
        size = cfg.data.train_batch_size
        per_epoch = self._steps_per_epoch()
        for step in range(start_step + 1, self.total_steps + 1):
            epoch, position = divmod(step - 1, per_epoch)
            order = list(range(len(self.train_rows)))
            if cfg.data.shuffle:
                random.Random(cfg.data.seed + epoch).shuffle(order)
            chosen = order[position * size : (position + 1) * size]
            yield step, [self.train_rows[i] for i in chosen]

    def train_step(self, step: int, batch: list[Prepared]) -> dict[str, float]:
        """One step (no stop checks): what benchmarks and tests drive directly."""
        return {**train_step(self.parts, step, batch), DROPPED_KEY: float(self.train_rows.dropped)}

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
        step, done, last, final = start_step, start_step, {}, {}
        started = time.perf_counter()
        with stop.installed():
            try:
                with workers_ignore_sigint():  # only while the processes are created
                    self.rewards.launch()
                print("reward: starting the scorer processes", flush=True)
                self.rewards.start()  # their imports: Ctrl-C here stops the run (start-up)
                if cfg.trainer.val_before_train and start_step == 0 and self.engine is not None:  # speech: none
                    before = self.validate(0)
                    print(validation_line(0, before), flush=True)
                    self._log(0, {"step": 0.0, **before}, sinks)
                stop.begin_training()
                for step, batch in self.batches(start_step):
                    try:
                        last = {**train_step(self.parts, step, batch, lambda: stop.requested),
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
                    if self.speech is not None and step in (start_step + 1, self.total_steps):
                        write_speech_samples(self.run_dir / "samples", step, self.speech)
                    if (cfg.trainer.save_freq > 0 and step % cfg.trainer.save_freq == 0) or step == self.total_steps:
                        self._save(step)
                    if stop.requested:
                        break
                if stop.requested:
                    self._save(done)
                    print(f"\nstopped after step {done}; checkpoint saved. Run the same command to resume.")
                else:
                    final = {k: v for k, v in last.items() if k.startswith("val-core/")} or self.validate(done)
            finally:
                self.rewards.close()  # the parent stops the workers (they ignore SIGINT)
                for audio_rewards in (self.probe_rewards, self.speech.rewards if self.speech else None):
                    if audio_rewards is not None:
                        audio_rewards.close()
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

    def _drift_metrics(self) -> dict[str, float]:
        """``talker/drift_kl``, and with ``trainer.talker_drift_rewards`` the audio rewards of
        the probes spoken anew from the thinker being trained (``talker/probe/...``)."""
        if self.drift is None:
            return {}
        metrics = self.drift.measure(self.actor.model)
        if self.probe_rewards is not None:
            spoken = self.drift.speak(self.actor.model)
            result = self.probe_rewards.score_batch([
                SpeechSample(np.asarray(p.waveform, dtype=np.float32), p.sample_rate, p.text, None, "talker_probe")
                for p in spoken
            ])
            metrics.update({f"talker/probe/{key}": value for key, value in result.metrics.items()})
        return metrics

    @torch.no_grad()
    def validate(self, step: int) -> dict[str, float]:
        """``rollout.val_kwargs`` responses on the validation prompts:
        ``val-core/<data_source>/<metric>/mean@<n>`` (none for the speech task: its training
        curve is the measurement; none without ``data.val_files``). With
        ``trainer.log_val_generations``, samples of them are logged as ``step``'s."""
        if self.engine is None:
            return {}
        drift = self._drift_metrics()
        if not self.val_rows:  # data.val_files unset: nothing to validate on
            return drift
        sampling = validation_sampling(self.config)
        rollouts = self.engine.generate([p.inputs for p in self.val_rows], sampling)
        owners = [p for p, r in zip(self.val_rows, rollouts, strict=True) for _ in r.outputs]
        texts = [self.tokenizer.decode(o.token_ids, skip_special_tokens=True) for r in rollouts for o in r.outputs]
        result = self.rewards.score_batch(
            [p.data_source for p in owners], texts, [p.ground_truth for p in owners], [p.extra_info or {} for p in owners],
        )
        metrics: dict[str, float] = {}
        for source in sorted({p.data_source for p in owners}):
            outcomes = [o for o, p in zip(result.outcomes, owners, strict=True) if p.data_source == source]
            scored = [o for o in outcomes if o.status == "ok"]
            # A scorer failure is reported as such, never averaged in as a 0.
            metrics[f"val-core/{source}/reward_failures"] = float(len(outcomes) - len(scored))
            for key in scored[0].result if scored else ():
                values = [o.result[key] for o in scored]
                metrics[f"val-core/{source}/{key}/mean@{sampling.n}"] = sum(values) / len(values)
        if self.generations is not None:
            prompts = [self.tokenizer.decode(p.inputs["input_ids"][0], skip_special_tokens=True) for p in self.val_rows]
            inputs = [text for text, r in zip(prompts, rollouts, strict=True) for _ in r.outputs]
            self.generations.log(step, [
                ValGeneration(prompt, text, outcome.score, p.ground_truth, p.data_source, outcome.status)
                for prompt, text, outcome, p in zip(inputs, texts, result.outcomes, owners, strict=True)
            ])
        return {**metrics, **drift}

    def _save(self, step: int) -> None:
        if step == self.saved_step or step == 0:
            return
        state = {"step": step, "identity": run_identity(self.config)}
        save_checkpoint(self.start.checkpoints, step, self.actor, state, keep_last=self.config.trainer.max_checkpoints_to_keep)
        self.saved_step = step
