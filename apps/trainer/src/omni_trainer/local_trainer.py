"""The local engine, end to end, in one process: rollout -> rewards -> advantages -> update.

Wires the packages through their public APIs: the adapters come from the registry (the
checkpoint's ``architectures[0]`` and ``actor_rollout_ref.model.stage``), the actor from
omni-training, the engine and agent loop from omni-rollout, the scores from omni-rewards.
"""

from __future__ import annotations

import inspect
import random
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import torch
from omegaconf import OmegaConf

from omni_contracts import RolloutSample, get_rollout_adapter, get_training_adapter
from omni_rewards import SCORERS, RewardManager, RewardManagerConfig
from omni_rollout.agent_loops import get_agent_loop
from omni_rollout.local_engine import LocalEngine, find_policy_module
from omni_rollout.sampling import SamplingSettings
from omni_trainer import builtin_task
from omni_trainer.config import Config, ConfigError, to_yaml, uses_embedded_default
from omni_trainer.loggers import build_sinks
from omni_trainer.run_dir import MetricsLog, draw_curve
from omni_training.actor import Actor
from omni_training.advantages import AdvantageConfig, get_advantage_estimator
from omni_training.batching import MicroBatch, TeacherLogProbs, collate, plan_micro_batches
from omni_training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from omni_training.consistency import rollout_actor_consistency
from omni_training.distillation import DistillationConfigError, DistillationSettings, Teacher, check_shared_tokenizer
from omni_training.kl import kl_penalized_rewards
from omni_training.metrics import length_metrics
from omni_training.policy_loss import PolicyLossConfig
from omni_training.settings import ActorSettings, LoraSettings, OptimizerSettings


@dataclass
class Prepared:
    """One prompt, processed: model inputs (batch dim 1) and its reward fields."""

    inputs: dict[str, Any]
    data_source: str
    ground_truth: str
    index: int
    extra_info: dict[str, Any] | None = None


class PromptSource(Protocol):
    def __len__(self) -> int: ...
    def __getitem__(self, item: int, /) -> Prepared: ...


class BuiltinPrompts:
    """The built-in task's rows, processed on first use (start-up stays short)."""

    def __init__(self, rows: Sequence[dict[str, Any]], encode: Any) -> None:
        self.rows = rows
        self.encode = encode
        self.cache: dict[int, Prepared] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, item: int) -> Prepared:
        if item not in self.cache:
            self.cache[item] = self.encode(self.rows[item])
        return self.cache[item]


class DatasetPrompts:
    """RL parquet rows through omni-data's dataset, processed when a batch needs them."""

    def __init__(self, files: Sequence[str], processor: Any, max_prompt_length: int) -> None:
        from omni_data import DatasetConfig, RLDataset

        self.dataset = RLDataset(list(files), processor, DatasetConfig(max_prompt_length=max_prompt_length))
        print(self.dataset.report.format())

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: int) -> Prepared:
        row = self.dataset[item]
        inputs = {"input_ids": row["input_ids"][None], "attention_mask": row["attention_mask"][None], **row["multi_modal_inputs"]}
        return Prepared(inputs, row["data_source"], str(row["reward_model"]["ground_truth"]), int(row["index"]), row["extra_info"])


class StopRequested(Exception):
    pass


class LocalTrainer:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.run_dir = Path(config.trainer.default_local_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.stop_requested = False
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
        self.training_adapter = self._adapter_for(hf_config)
        self.rollout_adapter = get_rollout_adapter(cfg.actor_rollout_ref.rollout.pipeline_name)
        self.mode = cfg.actor_rollout_ref.rollout.pipeline_mode
        self.rollout_adapter.check_mode(self.mode)
        self.processor = self.training_adapter.configure_processor(model_path, hf_config)
        self.tokenizer = self.training_adapter.configure_tokenizer(model_path, hf_config)
        self.train_rows, self.val_rows = self._load_rows()
        self.total_steps = self._total_steps()
        distillation = self._check_distillation()
        self.actor = Actor.from_pretrained(
            model_path, self.training_adapter,
            settings=_actor_settings(cfg, distillation), lora=_lora_settings(cfg),
            optim=_optim_settings(cfg, self.total_steps),
        )
        self.teacher: Teacher | None = None
        if distillation is not None:
            self.teacher = self._load_teacher()
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        self.engine = LocalEngine(
            find_policy_module(self.actor.model, self.rollout_adapter, self.mode),
            eos_token_ids=(eos,), pad_token_id=pad,
            stage_id=self.rollout_adapter.policy_stage_id(self.mode),
            suppress_token_ids=multimodal_token_ids(self.tokenizer),
        )
        self.agent_loop = get_agent_loop(cfg.actor_rollout_ref.rollout.agent.default_agent_loop)
        if builtin_task.DATA_SOURCE not in SCORERS:
            SCORERS.add(builtin_task.DATA_SOURCE, builtin_task.score_digits)
        self.rewards = RewardManager(
            RewardManagerConfig(
                num_workers=cfg.reward.num_workers, timeout_s=cfg.reward.timeout_s,
                on_unknown_data_source=cfg.reward.on_unknown_data_source,  # type: ignore[arg-type]
            )
        )

    def _check_distillation(self) -> DistillationSettings | None:
        """The distillation settings, after checking the teacher shares the student's tokenizer
        (before any weights are loaded)."""
        cfg = self.config.distillation
        if not cfg.enabled:
            return None
        loss = cfg.distillation_loss
        try:
            settings = DistillationSettings(
                loss_mode=loss.loss_mode, topk=loss.topk, use_task_rewards=loss.use_task_rewards,
                distillation_loss_coef=loss.distillation_loss_coef, loss_max_clamp=loss.loss_max_clamp,
                log_prob_min_clamp=loss.log_prob_min_clamp, use_policy_gradient=loss.use_policy_gradient,
                clip_ratio=loss.clip_ratio, clip_ratio_low=loss.clip_ratio_low, clip_ratio_high=loss.clip_ratio_high,
            )
        except DistillationConfigError as exc:
            raise ConfigError(f"Invalid configuration:\n  - distillation.distillation_loss: {exc}") from exc
        teacher_path = cfg.teacher_models.teacher_model.model_path
        assert teacher_path is not None  # checked with the config
        from transformers import AutoConfig

        teacher_config = AutoConfig.from_pretrained(teacher_path)
        self.teacher_adapter = self._adapter_for(teacher_config)
        teacher_tokenizer = self.teacher_adapter.configure_tokenizer(teacher_path, teacher_config)
        check_shared_tokenizer(self.tokenizer, teacher_tokenizer)
        return settings

    def _adapter_for(self, hf_config: Any) -> Any:
        """The training adapter for a checkpoint's config (``architectures[0]`` and the stage)."""
        architecture = (getattr(hf_config, "architectures", None) or ["<none>"])[0]
        adapter = get_training_adapter(architecture, self.config.actor_rollout_ref.model.stage)
        return _with_freeze_settings(adapter, self.config)

    def _load_teacher(self) -> Teacher:
        cfg = self.config
        teacher = cfg.distillation.teacher_models.teacher_model
        assert teacher.model_path is not None
        device = next(self.actor.model.parameters()).device
        loaded = Teacher.from_pretrained(
            teacher.model_path, self.teacher_adapter, dtype=cfg.actor_rollout_ref.actor.dtype,
            device=device, offload=teacher.param_offload,
        )
        print(f"teacher: {teacher.model_path} (frozen, {'offloaded to CPU' if teacher.param_offload else 'resident'})")
        return loaded

    def _steps_per_epoch(self) -> int:
        size = self.config.data.train_batch_size
        per_epoch = len(self.train_rows) // size
        if per_epoch == 0:
            raise ValueError(f"train_batch_size={size} exceeds the {len(self.train_rows)} training prompts.")
        return per_epoch

    def _total_steps(self) -> int:
        """``trainer.total_training_steps``, else epochs x steps per epoch (also the LR horizon)."""
        cfg = self.config.trainer
        return cfg.total_training_steps or self._steps_per_epoch() * cfg.total_epochs

    def _load_rows(self) -> tuple[PromptSource, list[Prepared]]:
        cfg = self.config
        if cfg.data.train_files is None:
            train = builtin_task.builtin_rows(cfg.data.builtin_task_size, seed=cfg.data.seed)
            val = builtin_task.builtin_rows(16, seed=cfg.data.seed + 1)
            return BuiltinPrompts(train, self._encode), [self._encode(row) for row in val]
        length = cfg.data.max_prompt_length
        train_rows = DatasetPrompts(cfg.data.train_files, self.processor, length)
        if cfg.data.val_files:
            val_rows = DatasetPrompts(cfg.data.val_files, self.processor, length)
            return train_rows, [val_rows[i] for i in range(min(len(val_rows), cfg.data.val_batch_size))]
        return train_rows, [train_rows[i] for i in range(min(len(train_rows), cfg.data.val_batch_size))]

    def _encode(self, row: dict[str, Any]) -> Prepared:
        text = self.processor.apply_chat_template(row["messages"], add_generation_prompt=True, tokenize=False)
        media: dict[str, Any] = {}
        if row.get("images"):
            media["images"] = row["images"]
        if row.get("audios"):
            media["audio"] = row["audios"]
        inputs = dict(self.processor(text=[text], return_tensors="pt", **media))
        if inputs["input_ids"].shape[1] > self.config.data.max_prompt_length:
            raise ValueError(
                f"Built-in prompt {row['index']} has {inputs['input_ids'].shape[1]} tokens, over "
                f"data.max_prompt_length={self.config.data.max_prompt_length}."
            )
        return Prepared(inputs, row["data_source"], row["ground_truth"], row["index"])

    # --- the loop -----------------------------------------------------------------------------

    def batches(self, start_step: int) -> Iterator[tuple[int, list[Prepared]]]:
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

    def fit(self) -> dict[str, float]:
        cfg = self.config
        (self.run_dir / "config.yaml").write_text(to_yaml(cfg))
        checkpoints = self.run_dir / "checkpoints"
        start_step = 0
        latest = latest_checkpoint(checkpoints) if cfg.trainer.resume_mode == "auto" else None
        if latest is not None:
            state = load_checkpoint(latest, self.actor)
            start_step = int(state["step"])
            print(f"resumed from {latest} (step {start_step})")
        self.log = MetricsLog(self.run_dir / "metrics.jsonl", resume_after=start_step if latest else None)
        sinks = build_sinks(
            cfg.trainer.logger, self.run_dir, project=cfg.trainer.project_name,
            experiment=cfg.trainer.experiment_name, config=OmegaConf.to_container(OmegaConf.structured(cfg)),  # type: ignore[arg-type]
        )
        total = self.total_steps
        previous = _install_interrupt_handler(self)
        last: dict[str, float] = {}
        step = start_step
        started = time.perf_counter()
        try:
            self.rewards.start()
            for step, batch in self.batches(start_step):
                last = self.train_step(step, batch)
                if cfg.trainer.test_freq and step % cfg.trainer.test_freq == 0:
                    last.update(self.validate())
                self.log.append(last)
                for sink in sinks:
                    sink.log(step, last)
                self._report(step, total, last)
                saving = cfg.trainer.save_freq and step % cfg.trainer.save_freq == 0
                if saving or step == total or self.stop_requested:
                    self._save(checkpoints, step)
                if self.stop_requested:
                    print(f"\nstopped at step {step}; checkpoint saved. Run the same command to resume.")
                    break
        finally:
            signal.signal(signal.SIGINT, previous)
            self.rewards.close()
            for sink in sinks:
                sink.close()
        elapsed = time.perf_counter() - started
        final = self.validate()
        self._summary(step, elapsed, last, final)
        return {**last, **final}

    def train_step(self, step: int, batch: list[Prepared]) -> dict[str, float]:
        cfg = self.config
        rollout = cfg.actor_rollout_ref.rollout
        timings: dict[str, float] = {}
        started = time.perf_counter()
        sampling = SamplingSettings(
            n=rollout.n, temperature=rollout.temperature, top_p=rollout.top_p, top_k=rollout.top_k,
            max_new_tokens=cfg.data.max_response_length, seed=rollout_seed(cfg.trainer.seed, step),
        )
        rollouts = self.engine.generate([p.inputs for p in batch], sampling)
        samples: list[RolloutSample] = []
        owners: list[Prepared] = []
        for prepared, prompt_rollout in zip(batch, rollouts, strict=True):
            for output in prompt_rollout.outputs:
                samples.append(self.agent_loop(
                    prompt_ids=prompt_rollout.prompt_ids, outputs=[output], adapter=self.rollout_adapter,
                    mode=self.mode, specs=self.training_adapter.extra_field_specs,
                ))
                owners.append(prepared)
        timings["timing_s/gen"] = time.perf_counter() - started

        started = time.perf_counter()
        texts = [self.tokenizer.decode(s.response_ids, skip_special_tokens=True) for s in samples]
        scored = self.rewards.score_batch(
            [o.data_source for o in owners], texts, [o.ground_truth for o in owners],
            [o.extra_info or {} for o in owners],
        )
        scores = torch.tensor(scored.scores, dtype=torch.float32)
        accuracy = torch.tensor([o.result.get("acc", o.score) for o in scored.outcomes], dtype=torch.float32)
        timings["timing_s/reward"] = time.perf_counter() - started

        started = time.perf_counter()
        micro = self._micro_batches(samples, owners)
        old = self.actor.compute_log_probs(micro)
        for mb, log_probs in zip(micro, old, strict=True):
            mb.old_log_probs = log_probs
        width = max(mb.responses.shape[1] for mb in micro)
        mask = torch.cat([_pad_cols(mb.response_mask, width) for mb in micro]).float()
        rollout_lp = torch.cat([_pad_cols(mb.rollout_log_probs, width) for mb in micro])  # type: ignore[arg-type]
        actor_lp = torch.cat([_pad_cols(lp, width) for lp in old])
        consistency = rollout_actor_consistency(rollout_lp, actor_lp, mask)
        distill_metrics: dict[str, float] = {}
        if self.teacher is not None:
            teacher_started = time.perf_counter()
            distill_metrics = self._score_with_teacher(samples, owners, micro, actor_lp, mask)
            distill_metrics["timing_s/teacher"] = time.perf_counter() - teacher_started
        token_rewards = torch.zeros_like(mask)
        lengths = mask.sum(dim=-1).long()
        token_rewards[torch.arange(len(samples)), (lengths - 1).clamp(min=0)] = scores
        kl_metrics: dict[str, float] = {}
        if cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward:
            refs = self.actor.compute_log_probs(micro, reference=True)
            for mb, ref in zip(micro, refs, strict=True):
                mb.ref_log_probs = ref
            if cfg.algorithm.use_kl_in_reward:
                ref_lp = torch.cat([_pad_cols(r, width) for r in refs])
                token_rewards, mean_kl = kl_penalized_rewards(
                    token_rewards, actor_lp, ref_lp, mask, coef=cfg.algorithm.kl_ctrl.kl_coef, mode=cfg.algorithm.kl_penalty
                )
                kl_metrics["actor/reward_kl_penalty"] = float(mean_kl)
        estimator = get_advantage_estimator(cfg.algorithm.adv_estimator)
        advantages = estimator(
            token_level_rewards=token_rewards, response_mask=mask, index=[o.index for o in owners],
            config=AdvantageConfig(norm_adv_by_std_in_grpo=cfg.algorithm.norm_adv_by_std_in_grpo, gamma=cfg.algorithm.gamma),
        ).advantages
        offset = 0
        for mb in micro:
            rows, cols = mb.responses.shape
            mb.advantages = advantages[offset : offset + rows, :cols]
            offset += rows
        timings["timing_s/old_log_prob"] = time.perf_counter() - started

        started = time.perf_counter()
        actor_metrics: dict[str, float] = {}
        per_update = cfg.actor_rollout_ref.actor.ppo_mini_batch_size * rollout.n
        for _ in range(cfg.actor_rollout_ref.actor.ppo_epochs):
            for group in _group_micro_batches(micro, per_update):
                actor_metrics = self.actor.update(group)
        timings["timing_s/update_actor"] = time.perf_counter() - started
        step_time = sum(timings.values())
        generated = float(mask.sum())
        return {
            "step": float(step),
            "critic/score/mean": float(scores.mean()),
            "critic/acc/mean": float(accuracy.mean()),
            "critic/advantages/mean": float((advantages * mask).sum() / mask.sum().clamp(min=1)),
            **scored.metrics,
            **consistency,
            **distill_metrics,
            **actor_metrics,
            **kl_metrics,
            **length_metrics(mask, max_response_length=cfg.data.max_response_length),
            **timings,
            "timing_s/step": step_time,
            "perf/throughput_tokens_per_s": generated / max(step_time, 1e-9),
            **self.engine.stats.metrics(),
        }

    def _score_with_teacher(
        self, samples: Sequence[RolloutSample], owners: Sequence[Prepared], micro: Sequence[MicroBatch],
        student_lp: torch.Tensor, mask: torch.Tensor,
    ) -> dict[str, float]:
        """Teacher log-probs of the sampled responses, in teacher-sized micro-batches, laid onto
        the actor's micro-batches; returns the ``distill/*`` metrics of the current policy."""
        assert self.teacher is not None and self.actor.settings.distillation is not None
        distill = self.actor.settings.distillation
        size = self.config.distillation.teacher_models.teacher_model.log_prob_micro_batch_size_per_gpu
        scored = self.teacher.score(self._micro_batches(samples, owners, size=size), topk=distill.topk if distill.uses_topk else None)
        width = mask.shape[1]
        log_probs = torch.cat([_pad_cols(t.log_probs, width) for t in scored])
        topk_ids = topk_lp = None
        if distill.uses_topk:
            topk_ids = torch.cat([_pad_rows_cols(t.topk_ids, width) for t in scored])
            topk_lp = torch.cat([_pad_rows_cols(t.topk_log_probs, width) for t in scored])
        offset = 0
        for mb in micro:
            rows, cols = mb.responses.shape
            mb.teacher = TeacherLogProbs(
                log_probs[offset : offset + rows, :cols],
                None if topk_ids is None else topk_ids[offset : offset + rows, :cols],
                None if topk_lp is None else topk_lp[offset : offset + rows, :cols],
            )
            offset += rows
        tokens = mask.sum().clamp(min=1)
        return {
            # k1 on the student's own samples: the Monte-Carlo estimate of KL(student || teacher).
            "distill/kl_mean": float(((student_lp - log_probs) * mask).sum() / tokens),
            "distill/teacher_logprob_mean": float((log_probs * mask).sum() / tokens),
            "distill/student_logprob_mean": float((student_lp * mask).sum() / tokens),
        }

    def _micro_batches(
        self, samples: Sequence[RolloutSample], owners: Sequence[Prepared], *, size: int | None = None
    ) -> list[MicroBatch]:
        """Consecutive samples per micro-batch: ``size`` rows, else the actor's count, or a
        padded-token budget with ``use_dynamic_bsz`` (``ppo_max_token_len_per_gpu``)."""
        actor = self.config.actor_rollout_ref.actor
        if size is None and actor.use_dynamic_bsz:
            lengths = [int(o.inputs["input_ids"].shape[1]) + len(s.response_ids) for s, o in zip(samples, owners, strict=True)]
            groups = plan_micro_batches(lengths, max_tokens=actor.ppo_max_token_len_per_gpu, max_rows=None)
        else:
            size = size or actor.ppo_micro_batch_size_per_gpu
            groups = [list(range(start, min(start + size, len(samples)))) for start in range(0, len(samples), size)]
        pad = self.engine.pad_token_id
        batches = []
        for group in groups:
            chunk = [samples[i] for i in group]
            inputs, responses, mask = collate(
                [owners[i].inputs for i in group], [s.response_ids for s in chunk],
                [s.response_mask for s in chunk], pad_token_id=pad,
            )
            rollout_lp = torch.zeros(mask.shape, dtype=torch.float32)
            for row, sample in enumerate(chunk):
                if sample.response_logprobs is not None:
                    rollout_lp[row, : len(sample.response_logprobs)] = torch.tensor(sample.response_logprobs)
            batches.append(MicroBatch(inputs, responses, mask, rollout_log_probs=rollout_lp))
        return batches

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Greedy responses on the validation prompts: ``val-core/<data_source>/<metric>/mean@1``."""
        greedy = SamplingSettings(n=1, temperature=0.0, max_new_tokens=self.config.data.max_response_length)
        rollouts = self.engine.generate([p.inputs for p in self.val_rows], greedy)
        texts = [self.tokenizer.decode(r.outputs[0].token_ids, skip_special_tokens=True) for r in rollouts]
        result = self.rewards.score_batch(
            [p.data_source for p in self.val_rows], texts, [p.ground_truth for p in self.val_rows],
            [p.extra_info or {} for p in self.val_rows],
        )
        metrics: dict[str, float] = {}
        sources = sorted({p.data_source for p in self.val_rows})
        for source in sources:
            outcomes = [o for o, p in zip(result.outcomes, self.val_rows, strict=True) if p.data_source == source]
            for key in outcomes[0].result:
                values = [o.result.get(key, 0.0) for o in outcomes]
                metrics[f"val-core/{source}/{key}/mean@1"] = sum(values) / len(values)
        return metrics

    # --- reporting and saving -------------------------------------------------------------------

    def _report(self, step: int, total: int, m: dict[str, float]) -> None:
        print(
            f"step {step:>4}/{total} | reward {m['critic/score/mean']:.3f} | acc {m['critic/acc/mean']:.3f} | "
            f"pearson {m.get('training/rollout_actor_probs_pearson_corr', float('nan')):.4f} | "
            f"grad {m.get('actor/grad_norm', float('nan')):.3f} | {m['timing_s/step']:.1f} s",
            flush=True,
        )
        draw_curve(
            self.run_dir / "curve.png",
            {"reward": self.log.series("critic/score/mean"), "acc": self.log.series("critic/acc/mean")},
            f"{self.config.trainer.experiment_name}: reward and accuracy per step",
        )

    def _save(self, root: Path, step: int) -> None:
        if (root / f"step_{step:06d}").exists():
            return
        save_checkpoint(root, step, self.actor, {"step": step}, keep_last=self.config.trainer.max_checkpoints_to_keep)

    def _summary(self, step: int, elapsed: float, last: dict[str, float], final: dict[str, float]) -> None:
        rewards = [v for _, v in self.log.series("critic/score/mean")]
        first = sum(rewards[:5]) / max(1, len(rewards[:5]))
        recent = sum(rewards[-5:]) / max(1, len(rewards[-5:]))
        checkpoint = latest_checkpoint(self.run_dir / "checkpoints")
        lines = [
            f"run directory: {self.run_dir.resolve()}",
            f"steps: {step} in {elapsed:.0f} s this session",
            f"mean reward: first 5 steps {first:.3f} -> last 5 steps {recent:.3f}",
            *(f"{key}: {value:.3f}" for key, value in sorted(final.items())),
            f"curve: {(self.run_dir / 'curve.png').resolve()}",
            f"metrics: {(self.run_dir / 'metrics.jsonl').resolve()}",
            f"latest checkpoint: {checkpoint.resolve() if checkpoint else 'none'}"
            + (" (LoRA adapter in adapter/)" if self.actor.uses_lora else ""),
        ]
        if uses_embedded_default(self.config):
            lines.append(
                "next: point it at a real model and data, e.g. uv run trainer "
                "actor_rollout_ref.model.path=$MODEL_PATH data.train_files=$TRAIN_FILE"
            )
        text = "\n".join(lines)
        (self.run_dir / "summary.txt").write_text(text + "\n")
        print(text)


def rollout_seed(seed: int, step: int) -> int:
    """The sampling seed of a step. The engine seeds prompt ``i`` with ``seed + i``, so steps
    are spaced far apart: no prompt of one step replays another step's random stream."""
    return (seed * 100_003 + step) * 1_000_003


MULTIMODAL_TOKEN_ATTRIBUTES = (
    "image_token", "video_token", "audio_token",
    "vision_bos_token", "vision_eos_token", "audio_bos_token", "audio_eos_token",
)


def multimodal_token_ids(tokenizer: Any) -> tuple[int, ...]:
    """Ids of the tokenizer's multimodal placeholder tokens (never valid in a response)."""
    ids = []
    for attribute in MULTIMODAL_TOKEN_ATTRIBUTES:
        token = getattr(tokenizer, attribute, None)
        if isinstance(token, str):
            ids.append(int(tokenizer.convert_tokens_to_ids(token)))
    return tuple(sorted(set(ids)))


def _pad_cols(tensor: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(tensor, (0, width - tensor.shape[1]))


def _pad_rows_cols(tensor: torch.Tensor | None, width: int) -> torch.Tensor:
    """``[B, T, k]`` -> ``[B, width, k]`` (pads the response axis)."""
    assert tensor is not None
    return torch.nn.functional.pad(tensor, (0, 0, 0, width - tensor.shape[1]))


def _group_micro_batches(micro: Sequence[MicroBatch], samples_per_update: int) -> list[list[MicroBatch]]:
    groups: list[list[MicroBatch]] = [[]]
    count = 0
    for mb in micro:
        if count >= samples_per_update and groups[-1]:
            groups.append([])
            count = 0
        groups[-1].append(mb)
        count += mb.responses.shape[0]
    return groups


def _with_freeze_settings(adapter: Any, cfg: Config) -> Any:
    wanted = {
        "freeze_vision_tower": cfg.actor_rollout_ref.model.freeze_vision_tower,
        "freeze_audio_tower": cfg.actor_rollout_ref.model.freeze_audio_tower,
    }
    accepted = inspect.signature(type(adapter)).parameters
    kwargs = {k: v for k, v in wanted.items() if k in accepted}
    return type(adapter)(**kwargs) if kwargs else adapter


def _actor_settings(cfg: Config, distillation: DistillationSettings | None = None) -> ActorSettings:
    actor = cfg.actor_rollout_ref.actor
    return ActorSettings(
        loss_mode=actor.policy_loss.loss_mode,
        policy_loss=PolicyLossConfig(
            clip_ratio=actor.clip_ratio, clip_ratio_low=actor.clip_ratio_low, clip_ratio_high=actor.clip_ratio_high,
            clip_ratio_c=actor.clip_ratio_c, loss_agg_mode=actor.loss_agg_mode,
        ),
        use_kl_loss=actor.use_kl_loss, kl_loss_coef=actor.kl_loss_coef, kl_loss_type=actor.kl_loss_type,
        entropy_coeff=actor.entropy_coeff, temperature=cfg.actor_rollout_ref.rollout.temperature or 1.0,
        dtype=actor.dtype,  # type: ignore[arg-type]
        distillation=distillation,
    )


def _lora_settings(cfg: Config) -> LoraSettings:
    model = cfg.actor_rollout_ref.model
    return LoraSettings(
        rank=model.lora_rank, alpha=model.lora_alpha, dropout=model.lora_dropout,
        target_modules=tuple(model.target_modules) if model.target_modules else None,
        exclude_modules=model.exclude_modules,
    )


def _optim_settings(cfg: Config, total_steps: int | None) -> OptimizerSettings:
    optim = cfg.actor_rollout_ref.actor.optim
    return OptimizerSettings(
        lr=optim.lr, weight_decay=optim.weight_decay, warmup_steps=optim.lr_warmup_steps,
        schedule=optim.lr_scheduler_type,  # type: ignore[arg-type]
        total_steps=total_steps, min_lr_ratio=optim.min_lr_ratio, grad_clip=cfg.actor_rollout_ref.actor.grad_clip,
    )


def _install_interrupt_handler(trainer: LocalTrainer) -> Any:
    """First Ctrl-C: finish the step, save, exit. Second: exit at once."""
    previous = signal.getsignal(signal.SIGINT)

    def handle(signum: int, frame: FrameType | None) -> None:
        if trainer.stop_requested:
            print("\nsecond interrupt: exiting now without saving", file=sys.stderr)
            raise KeyboardInterrupt
        trainer.stop_requested = True
        print("\ninterrupt: finishing this step, then saving a checkpoint (Ctrl-C again to quit now)", file=sys.stderr)

    signal.signal(signal.SIGINT, handle)
    return previous
