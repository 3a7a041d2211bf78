"""On-policy distillation: RL on text whose step also asks a frozen teacher for the log-probs
of the student's own samples (``distillation.*``); the actor's loss reads them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from omni_rewards import RewardManager
from omni_rollout.local_engine import LocalEngine
from omni_training.actor import Actor
from omni_training.batching import MicroBatch, TeacherLogProbs
from omni_training.distillation import DistillationSettings, Teacher, check_shared_tokenizer
from omni_training.logit_mask import mask_policy_logits

from omni_trainer.settings_builders import distillation_settings, model_dtype
from omni_trainer.engines.local.step import Rollouts, StepParts, micro_batches, pad_cols
from omni_trainer.engines.local.tasks.text_rl import TextRL, TextSampler


@dataclass
class TeacherSampler(TextSampler):
    """The text sampler, with the teacher's log-probs of each sample laid on the micro-batches."""

    teacher: Teacher | None = None
    settings: DistillationSettings | None = None
    micro_batch_size: int = 1
    reads_old_log_probs = True  # the distill/* metrics compare the student's to the teacher's

    def log_prob_extras(
        self, parts: StepParts, rollouts: Rollouts, micro: Sequence[MicroBatch], old_log_probs: torch.Tensor | None,
        mask: torch.Tensor,
    ) -> dict[str, float]:
        """Teacher log-probs of the sampled responses, in teacher-sized micro-batches, laid onto
        the actor's micro-batches; returns the ``distill/*`` metrics of the current policy."""
        assert self.teacher is not None and self.settings is not None and old_log_probs is not None
        started = time.perf_counter()
        topk = self.settings.topk if self.settings.uses_topk else None
        scored = self.teacher.score(
            micro_batches(parts, rollouts.samples, rollouts.owners, size=self.micro_batch_size), topk=topk
        )
        width = mask.shape[1]
        log_probs = torch.cat([pad_cols(t.log_probs, width) for t in scored])
        topk_ids = topk_lp = None
        if topk is not None:
            topk_ids = torch.cat([_pad_response_axis(t.topk_ids, width) for t in scored])
            topk_lp = torch.cat([_pad_response_axis(t.topk_log_probs, width) for t in scored])
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
            "distill/kl_mean": float(((old_log_probs - log_probs) * mask).sum() / tokens),
            "distill/teacher_logprob_mean": float((log_probs * mask).sum() / tokens),
            "distill/student_logprob_mean": float((old_log_probs * mask).sum() / tokens),
            "timing_s/teacher": time.perf_counter() - started,
        }


def _pad_response_axis(tensor: torch.Tensor | None, width: int) -> torch.Tensor:
    """``[B, T, k]`` -> ``[B, width, k]``."""
    assert tensor is not None
    return torch.nn.functional.pad(tensor, (0, 0, 0, width - tensor.shape[1]))


class Distillation(TextRL):
    """Text RL with a frozen teacher (``distillation.teacher_models.teacher_model``), which
    must share the student's tokenizer: checked before any weights load."""

    teacher: Teacher | None = None

    def distillation(self) -> DistillationSettings:
        from transformers import AutoConfig

        cfg = self.config
        settings = distillation_settings(cfg)
        assert settings is not None  # distillation.enabled selects this task; the pre-flight checked the values
        teacher_path = cfg.distillation.teacher_models.teacher_model.model_path
        assert teacher_path is not None  # checked with the config
        teacher_config = AutoConfig.from_pretrained(teacher_path)
        self.teacher_adapter = self.run.resolved.teacher_adapter()
        check_shared_tokenizer(self.run.tokenizer, self.teacher_adapter.configure_tokenizer(teacher_path, teacher_config))
        self.settings = settings
        return settings

    def build(self, actor: Actor, device: str) -> None:
        self.teacher = self._load_teacher(actor, device)
        super().build(actor, device)

    def _load_teacher(self, actor: Actor, device: str) -> Teacher:
        cfg = self.config
        teacher = cfg.distillation.teacher_models.teacher_model
        assert teacher.model_path is not None
        loaded = Teacher.from_pretrained(
            teacher.model_path, self.teacher_adapter, dtype=model_dtype(cfg, device),
            device=next(actor.model.parameters()).device, offload=teacher.param_offload,
        )
        # The teacher scores the student's samples under the mask they were sampled with
        # (its mass on ids no sample can hold would add log(1 - P(masked)) to every token).
        mask_policy_logits(loaded.model, self.run.logit_mask(self.run.mode))
        print(f"teacher: {teacher.model_path} (frozen, {'offloaded to CPU' if teacher.param_offload else 'resident'})")
        return loaded

    def _sampler(self, engine: LocalEngine, rewards: RewardManager) -> TextSampler:
        text = super()._sampler(engine, rewards)
        fields: dict[str, Any] = {name: getattr(text, name) for name in text.__dataclass_fields__}
        return TeacherSampler(
            **fields, teacher=self.teacher, settings=self.settings,
            micro_batch_size=self.config.distillation.teacher_models.teacher_model.log_prob_micro_batch_size_per_gpu,
        )
