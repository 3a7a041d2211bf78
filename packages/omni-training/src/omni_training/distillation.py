"""On-policy distillation: a frozen teacher scores the student's own samples.

The student samples responses as in RL; the teacher's log-probs of those tokens (and, for
``forward_kl_topk``, its top-k distribution) give a per-token divergence. Two ways to use
it, under verl's ``distillation.distillation_loss`` names:

- ``use_policy_gradient=true``: ``-divergence`` is a per-token advantage in a token-level
  clipped policy-gradient loss (reverse KL on sampled tokens, ``loss_mode=kl``). The
  gradient flows through the ratio, so the student moves toward tokens the teacher likes.
- ``use_policy_gradient=false``: the divergence itself is the loss (``k3``, or
  ``forward_kl_topk`` over the teacher's top-k tokens). ``kl``/``k1`` are refused here:
  their gradient does not depend on the teacher at all.

With ``use_task_rewards=true`` the task's policy loss stays and the distillation loss is
added with ``distillation_loss_coef``; with ``false`` the task loss is dropped (pure
distillation; rewards are still scored and reported).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from omni_contracts import TrainingAdapter
from omni_training.aggregation import aggregate_loss
from omni_training.batching import MicroBatch, TeacherLogProbs, adapter_model_inputs
from omni_training.kl import KL_MODES, kl_estimate
from omni_training.logprobs import response_log_probs
from omni_training.model_loading import load_policy
from omni_training.policy_loss import BatchCounts, PolicyLossConfig, get_policy_loss
from omni_training.settings import NO_LORA

TOPK_MODES = ("forward_kl_topk",)
DISTILLATION_LOSS_MODES = (*KL_MODES, *TOPK_MODES)


class DistillationConfigError(ValueError):
    """Distillation settings that cannot work together."""


@dataclass(frozen=True)
class DistillationSettings:
    """``distillation.distillation_loss.*`` (verl's names)."""

    loss_mode: str = "kl"
    topk: int = 32
    use_task_rewards: bool = True
    distillation_loss_coef: float = 1.0
    loss_max_clamp: float | None = None
    log_prob_min_clamp: float | None = None
    use_policy_gradient: bool = True
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None

    def __post_init__(self) -> None:
        if self.loss_mode not in DISTILLATION_LOSS_MODES:
            raise DistillationConfigError(
                f"Unknown distillation loss_mode {self.loss_mode!r}; valid: {', '.join(DISTILLATION_LOSS_MODES)}."
            )
        if not self.use_policy_gradient and self.loss_mode in ("kl", "k1"):
            raise DistillationConfigError(
                f"loss_mode={self.loss_mode} as a direct loss has a gradient that ignores the teacher "
                "(d/dθ of log π_student alone); use it with use_policy_gradient=true, or pick k3 or "
                "forward_kl_topk for a direct loss."
            )
        if self.uses_topk and self.topk < 1:
            raise DistillationConfigError(f"forward_kl_topk needs topk >= 1, got {self.topk}.")

    @property
    def uses_topk(self) -> bool:
        return self.loss_mode in TOPK_MODES

    def policy_loss_config(self, loss_agg_mode: str) -> PolicyLossConfig:
        """The token-level clipped PG loss that carries ``-divergence`` as the advantage."""
        return PolicyLossConfig(
            clip_ratio=self.clip_ratio, clip_ratio_low=self.clip_ratio_low,
            clip_ratio_high=self.clip_ratio_high, loss_agg_mode=loss_agg_mode,
        )


def distillation_token_losses(
    student_log_probs: Tensor,  # [B, T]
    teacher: TeacherLogProbs,
    settings: DistillationSettings,
    *,
    student_topk_log_probs: Tensor | None = None,  # [B, T, k] at teacher.topk_ids
) -> Tensor:
    """Per-token divergence ``[B, T]`` of the student from the teacher."""
    if settings.uses_topk:
        if teacher.topk_log_probs is None or student_topk_log_probs is None:
            raise ValueError("forward_kl_topk needs the teacher's top-k log-probs and the student's at those ids.")
        teacher_topk = _clamp(teacher.topk_log_probs, settings)
        student_topk = _clamp(student_topk_log_probs, settings)
        # KL(teacher || student) restricted to the teacher's top-k tokens; the truncated
        # distributions do not sum to one, so a tiny negative value is clipped to 0.
        losses = (teacher_topk.exp() * (teacher_topk - student_topk)).sum(dim=-1).clamp_min(0.0)
    else:
        losses = kl_estimate(
            _clamp(student_log_probs, settings), _clamp(teacher.log_probs, settings), settings.loss_mode
        )
    if settings.loss_max_clamp is not None:
        losses = losses.clamp(-settings.loss_max_clamp, settings.loss_max_clamp)
    return losses


def _clamp(log_probs: Tensor, settings: DistillationSettings) -> Tensor:
    if settings.log_prob_min_clamp is None:
        return log_probs
    return log_probs.clamp_min(settings.log_prob_min_clamp)


def distillation_loss(
    *,
    student_log_probs: Tensor,  # [B, T], differentiable
    old_log_probs: Tensor,  # [B, T]
    teacher: TeacherLogProbs,
    response_mask: Tensor,  # [B, T], float
    settings: DistillationSettings,
    loss_agg_mode: str,
    counts: BatchCounts,
    student_topk_log_probs: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``(loss, per-token divergence)`` for one micro-batch, aggregated like the policy loss."""
    losses = distillation_token_losses(
        student_log_probs, teacher, settings, student_topk_log_probs=student_topk_log_probs
    )
    if settings.use_policy_gradient:
        output = get_policy_loss("vanilla")(
            old_log_prob=old_log_probs, log_prob=student_log_probs, advantages=-losses.detach(),
            response_mask=response_mask, config=settings.policy_loss_config(loss_agg_mode), counts=counts,
        )
        return output.loss, losses
    loss = aggregate_loss(
        losses, response_mask, loss_agg_mode,
        num_tokens=counts.num_tokens, num_sequences=counts.num_sequences, horizon=counts.horizon,
    )
    return loss, losses


class Teacher:
    """A frozen teacher module in the trainer's process (the local engine's teacher).

    ``offload=True`` keeps the weights on the CPU and moves them to ``device`` only while
    scoring, so one GPU can hold the student's training state and, briefly, the teacher.
    """

    def __init__(
        self,
        model: Any,
        adapter: TrainingAdapter,
        model_config: Any,
        *,
        device: str | torch.device = "cpu",
        offload: bool = False,
    ) -> None:
        self.model = model.eval().requires_grad_(False)
        self.adapter = adapter
        self.model_config = model_config
        self.device = torch.device(device)
        self.offload = offload
        self.model.to("cpu" if offload else self.device)

    @classmethod
    def from_pretrained(
        cls,
        model_path: str,
        adapter: TrainingAdapter,
        *,
        dtype: str = "float32",
        device: str | torch.device = "cpu",
        offload: bool = False,
    ) -> Teacher:
        model, config = load_policy(model_path, adapter, NO_LORA, dtype=dtype, frozen=True)
        return cls(model, adapter, config, device=device, offload=offload)

    @contextlib.contextmanager
    def _on_device(self) -> Iterator[None]:
        if not self.offload or self.device.type == "cpu":
            yield
            return
        self.model.to(self.device)
        try:
            yield
        finally:
            self.model.to("cpu")

    @torch.no_grad()
    def score(self, batches: list[MicroBatch], *, topk: int | None = None) -> list[TeacherLogProbs]:
        """The teacher's log-probs of each micro-batch's responses (temperature 1)."""
        results = []
        with self._on_device():
            for batch in batches:
                batch = batch.to(self.device)  # the results come back to the CPU, as the actor's do
                inputs = adapter_model_inputs(batch, self.adapter, self.model_config)
                out = response_log_probs(self.model, inputs, batch.responses, topk=topk)
                mask = batch.response_mask > 0
                results.append(TeacherLogProbs(
                    log_probs=(out.log_probs * mask).cpu(),
                    topk_ids=None if out.topk_ids is None else out.topk_ids.cpu(),
                    topk_log_probs=None if out.topk_log_probs is None else out.topk_log_probs.cpu(),
                ))
        return results


def sample_encoding_text() -> str:
    """Text whose encoding exposes most tokenizer differences (scripts, digits, spacing)."""
    return "Teacher and student: 12345 + 0.5 = ? 答案 Ünïcödé  tabs\tand\nnewlines <answer>B</answer>"


def check_shared_tokenizer(student: Any, teacher: Any) -> None:
    """Raise when teacher and student tokenizers differ in a way that breaks distillation.

    Token ids sampled by the student are scored by the teacher, so both must map text to
    the same ids: same vocabulary size, same special tokens with the same ids, and the same
    encoding of a sample text.

    Raises:
        DistillationConfigError: naming the first difference found.
    """
    if len(student) != len(teacher):
        raise DistillationConfigError(
            f"Teacher and student tokenizers differ in vocabulary size ({len(teacher)} vs {len(student)}); "
            "distillation needs one tokenizer (the same model family)."
        )
    student_special = _special_tokens(student)
    teacher_special = _special_tokens(teacher)
    if student_special != teacher_special:
        differing = sorted(set(student_special.items()) ^ set(teacher_special.items()))[:5]
        raise DistillationConfigError(
            f"Teacher and student tokenizers differ in special tokens (e.g. {differing}); "
            "distillation needs one tokenizer (the same model family)."
        )
    text = sample_encoding_text()
    student_ids = student.encode(text, add_special_tokens=False)
    teacher_ids = teacher.encode(text, add_special_tokens=False)
    if student_ids != teacher_ids:
        raise DistillationConfigError(
            f"Teacher and student tokenizers encode the same text differently ({text!r}: teacher "
            f"{teacher_ids[:12]}..., student {student_ids[:12]}...); distillation needs one tokenizer."
        )


def _special_tokens(tokenizer: Any) -> dict[str, int]:
    tokens = list(tokenizer.all_special_tokens) + [
        str(token) for token in getattr(tokenizer, "added_tokens_decoder", {}).values()
    ]
    return {token: int(tokenizer.convert_tokens_to_ids(token)) for token in sorted(set(tokens))}
