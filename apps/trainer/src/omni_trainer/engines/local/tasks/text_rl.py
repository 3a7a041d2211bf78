"""Online RL on text: the policy stage answers the prompts, the data sources' scorers pay the
answers, validation scores greedy answers to held-out prompts (``val-core/*``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from omni_contracts import RolloutAdapter, RolloutSample
from omni_contracts.speech import TalkerDriftProbe, talker_drift_probe
from omni_data.builtin import BUILTIN_VALIDATION_ROWS, DATA_SOURCE, builtin_rows, write_builtin_clips
from omni_rewards import SCORERS, RewardManager, ScorerRegistry
from omni_rewards.api import ground_truth_text
from omni_rewards.audio import SpeechSample, WeightedAudioReward
from omni_rollout.agent_loops import get_agent_loop
from omni_rollout.chat_server import ChatServer
from omni_rollout.local_engine import LocalEngine
from omni_training.actor import Actor, Regularizer

from omni_trainer.config import Config, ConfigError
from omni_rewards.reward_file import custom_registry, judge_kwargs
from omni_trainer.interrupts import workers_ignore_sigint
from omni_trainer.prompts import BuiltinPrompts, DatasetPrompts, Prepared, PromptSource, encode_builtin
from omni_trainer.settings_builders import judge_settings, reward_manager_config, sampling_settings, validation_sampling
from omni_trainer.engines.local.async_rollout import AsyncSampler, policy_copy
from omni_trainer.engines.local.step import Rollouts, Sampler, Scores, StepParts, new_group_ids, train_step
from omni_trainer.engines.local.task import LoadedRun, Task
from omni_trainer.engines.local.val_generations import ValGeneration, ValGenerationsLog


@dataclass
class TextSampler(Sampler):
    """Samples answers with the local engine and scores them by their data source."""

    config: Config
    engine: LocalEngine
    agent_loop: Callable[..., RolloutSample]
    rollout_adapter: RolloutAdapter
    mode: str
    extra_field_specs: Any
    tokenizer: Any
    rewards: RewardManager

    def rollout(self, prompts: Sequence[Prepared], step: int) -> Rollouts:
        outputs = self.engine.generate([p.inputs for p in prompts], sampling_settings(self.config, step))
        samples: list[RolloutSample] = []
        owners: list[Prepared] = []
        group_ids: list[str] = []
        for prepared, group, prompt_rollout in zip(prompts, new_group_ids(len(prompts)), outputs, strict=True):
            for output in prompt_rollout.outputs:
                samples.append(self.agent_loop(
                    prompt_ids=prompt_rollout.prompt_ids, outputs=[output], adapter=self.rollout_adapter,
                    mode=self.mode, specs=self.extra_field_specs,
                ))
                owners.append(prepared)
                group_ids.append(group)
        return Rollouts(samples, owners, group_ids)

    def score(self, rollouts: Rollouts) -> Scores:
        texts = [self.tokenizer.decode(s.response_ids, skip_special_tokens=True) for s in rollouts.samples]
        owners = rollouts.owners
        scored = self.rewards.score_batch(
            [o.data_source for o in owners], texts, [o.ground_truth for o in owners],
            [o.extra_info or {} for o in owners],
        )
        scores = torch.tensor(scored.scores, dtype=torch.float32)
        accuracy = torch.tensor([o.result.get("acc", o.score) for o in scored.outcomes], dtype=torch.float32)
        return Scores(scores, accuracy, dict(scored.metrics), list(scored.errors))

    def rollout_metrics(self) -> dict[str, float]:
        return self.engine.stats.metrics()


class TextRL(Task):
    """RL of the thinker (or a text model) on the built-in task or RL parquet files. With
    ``trainer.talker_drift``, it also measures (and may penalise) how the frozen talker's
    speech drifts as the thinker trains."""

    def __init__(self, run: LoadedRun) -> None:
        super().__init__(run)
        self.drift: TalkerDriftProbe | None = None
        self.probe_rewards: WeightedAudioReward | None = None
        self.rewards: RewardManager | None = None
        self._val_rows: list[Prepared] = []
        self.async_sampler: AsyncSampler | None = None
        self.judge: ChatServer | None = None

    def rows(self) -> tuple[PromptSource, list[Prepared]]:
        train, self._val_rows = self._load_rows()
        return train, self._val_rows

    def _load_rows(self) -> tuple[PromptSource, list[Prepared]]:
        cfg = self.config
        if cfg.data.train_files is None and cfg.data.hears_soundtracks:  # the clips, from files on both engines
            from omni_model_kit.tiny import default_cache_dir

            train_file, val_file = write_builtin_clips(default_cache_dir(), train_rows=cfg.data.builtin_task_size,
                                                       val_rows=BUILTIN_VALIDATION_ROWS, seed=cfg.data.seed)
            val_source = DatasetPrompts([str(val_file)], self.run.processor, cfg)
            return DatasetPrompts([str(train_file)], self.run.processor, cfg), [val_source[i] for i in range(len(val_source))]
        if cfg.data.train_files is None:
            train = builtin_rows(cfg.data.builtin_task_size, seed=cfg.data.seed)
            val = builtin_rows(BUILTIN_VALIDATION_ROWS, seed=cfg.data.seed + 1)
            return BuiltinPrompts(train, self._encode), [self._encode(row) for row in val]
        train_rows = DatasetPrompts(cfg.data.train_files, self.run.processor, cfg)
        if not cfg.data.val_files:  # never the training rows scored as val-core/* (the pre-flight says so)
            return train_rows, []
        val_source = DatasetPrompts(cfg.data.val_files, self.run.processor, cfg)
        return train_rows, [val_source[i] for i in range(min(len(val_source), cfg.data.val_batch_size))]

    def _encode(self, row: dict[str, Any]) -> Prepared:
        return encode_builtin(self.run.processor, row, self.config.data.max_prompt_length)

    def build(self, actor: Actor, device: str) -> None:
        cfg, run = self.config, self.run
        self.actor = actor
        actor.mask_logits(run.logit_mask(run.mode))
        self.engine = run.text_engine(actor, run.mode)
        self._build_drift(actor)
        if cfg.reward.reward_model.enable:  # serving from start(); its address is known now
            self.judge = ChatServer(judge_settings(cfg, device))
        self.rewards = RewardManager(reward_manager_config(cfg), registry=self._scorers())
        self.sampler = self._sampler(self.engine, self.rewards)
        self.parts = StepParts(cfg, self.sampler, actor, run.training_adapter, pad_token_id=self.engine.pad_token_id)

    def _sampler(self, engine: LocalEngine, rewards: RewardManager) -> TextSampler:
        run = self.run
        return TextSampler(
            self.config, engine, get_agent_loop(self.config.actor_rollout_ref.rollout.agent.default_agent_loop),
            run.rollout_adapter, run.mode, run.training_adapter.extra_field_specs, run.tokenizer, rewards,
        )

    def _build_drift(self, actor: Actor) -> None:
        cfg, run = self.config, self.run
        if not cfg.trainer.talker_drift:
            return
        self.drift = talker_drift_probe(run.training_adapter, run.model_path, run.hf_config)
        if self.drift is None:
            raise ConfigError(
                f"Invalid configuration:\n  - trainer.talker_drift=true needs a checkpoint that speaks; "
                f"{type(run.training_adapter).__name__} has no talker drift probe for {run.model_path}"
            )
        if cfg.trainer.talker_drift_rewards:
            self.probe_rewards = WeightedAudioReward(cfg.trainer.talker_drift_rewards)
        if cfg.actor_rollout_ref.actor.talker_drift_coef:
            actor.regularizers.append(
                Regularizer("talker_drift_penalty", cfg.actor_rollout_ref.actor.talker_drift_coef, self.drift.penalty)
            )

    def _scorers(self) -> ScorerRegistry:
        custom = self.config.reward.custom_reward_function
        if custom.path:
            judge = judge_kwargs(self.judge.address, self.judge.settings.model_path) if self.judge is not None else {}
            return custom_registry(custom.path, custom.name, self._data_sources(), {**custom.reward_kwargs, **judge})
        return SCORERS

    def _data_sources(self) -> set[str]:
        if self.config.data.train_files is None:
            return {DATA_SOURCE}
        return self.run.resolved.data_sources

    def prefetch(self, schedule: Callable[[int], list[Prepared]], first_step: int, last_step: int) -> None:
        """With ``async_training.max_staleness``, a thread samples the coming steps with a copy
        of the policy (:mod:`omni_trainer.engines.local.async_rollout`)."""
        staleness = self.config.async_training.max_staleness
        if staleness == 0 or first_step > last_step:
            return
        assert self.rewards is not None
        policy = policy_copy(self.actor.model)
        background = self._sampler(self.run.text_engine(self.actor, self.run.mode, model=policy), self.rewards)
        model = self.actor.model
        self.async_sampler = AsyncSampler(
            background, policy, lambda: {n: p for n, p in model.named_parameters() if p.requires_grad}, schedule,
            first_step=first_step, last_step=last_step, max_staleness=staleness,
        )
        self.parts = StepParts(
            self.config, self.async_sampler, self.actor, self.run.training_adapter, pad_token_id=self.parts.pad_token_id,
        )

    def step(self, step: int, prompts: list[Prepared], stop_requested: Callable[[], bool]) -> dict[str, float]:
        metrics = train_step(self.parts, step, prompts, stop_requested)
        if self.async_sampler is not None:
            self.async_sampler.publish(step)
        return metrics

    def start(self) -> None:
        assert self.rewards is not None
        with workers_ignore_sigint():  # only while the processes are created
            self.rewards.launch()
        print("reward: starting the scorer processes", flush=True)
        self.rewards.start()  # their imports: Ctrl-C here stops the run (start-up)
        if self.judge is not None:
            self.judge.start()
            print(f"reward: the judge {self.judge.settings.model_path} answers at http://{self.judge.address}"
                  f"/v1/chat/completions ({self.judge.settings.device}, {self.judge.settings.dtype})", flush=True)

    @torch.no_grad()
    def validate(self, step: int, generations: ValGenerationsLog | None) -> dict[str, float]:
        """``rollout.val_kwargs`` responses on the validation prompts:
        ``val-core/<data_source>/<metric>/mean@<n>`` (none without ``data.val_files``). With
        ``trainer.log_val_generations``, samples of them are logged as ``step``'s."""
        assert self.engine is not None and self.rewards is not None
        if self.async_sampler is not None:
            with self.async_sampler.paused():  # the rollout thread shares the reward workers
                return self._validate(step, generations)
        return self._validate(step, generations)

    def _validate(self, step: int, generations: ValGenerationsLog | None) -> dict[str, float]:
        assert self.engine is not None and self.rewards is not None
        drift = self._drift_metrics()
        val_rows = self._val_rows
        if not val_rows:  # data.val_files unset: nothing to validate on
            return drift
        tokenizer = self.run.tokenizer
        sampling = validation_sampling(self.config)
        rollouts = self.engine.generate([p.inputs for p in val_rows], sampling)
        owners = [p for p, r in zip(val_rows, rollouts, strict=True) for _ in r.outputs]
        texts = [tokenizer.decode(o.token_ids, skip_special_tokens=True) for r in rollouts for o in r.outputs]
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
        if generations is not None:
            prompts = [tokenizer.decode(p.inputs["input_ids"][0], skip_special_tokens=True) for p in val_rows]
            inputs = [text for text, r in zip(prompts, rollouts, strict=True) for _ in r.outputs]
            generations.log(step, [
                ValGeneration(prompt, text, outcome.score, ground_truth_text(p.ground_truth), p.data_source, outcome.status)
                for prompt, text, outcome, p in zip(inputs, texts, result.outcomes, owners, strict=True)
            ])
        return {**metrics, **drift}

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

    def close(self) -> None:
        if self.async_sampler is not None:
            self.async_sampler.close()  # before the reward workers it may be using
        for rewards in (self.rewards, self.probe_rewards):
            if rewards is not None:
                rewards.close()
        if self.judge is not None:
            self.judge.close()
