"""Plain-data settings of the actor (verl's names where verl has one).

A setting whose value the trainer's config schema gives has no default here: the schema is the
one place it is declared (the app's ``settings_builders`` passes it; a test in the app holds
the defaults that remain equal to the schema's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from omni_training.policy_loss import PolicyLossConfig

if TYPE_CHECKING:
    from omni_training.distillation import DistillationSettings
    from omni_training.rollout_correction import CorrectionSettings


@dataclass(frozen=True)
class LoraSettings:
    """``actor_rollout_ref.model.lora_*``; ``rank=0`` trains all (unfrozen) parameters, and
    :data:`NO_LORA` loads a model without an adapter (``alpha`` is then unused)."""

    rank: int
    alpha: int
    dropout: float = 0.0
    target_modules: tuple[str, ...] | str | None = None  # default: the adapter's
    exclude_modules: str | None = None  # default: the adapter's
    target_parameters: tuple[str, ...] | None = None  # nn.Parameters by name (a MoE's fused experts)

    def __post_init__(self) -> None:
        if self.rank < 0:
            raise ValueError(f"lora_rank must be >= 0 (0 = full-parameter training), got {self.rank}.")


NO_LORA = LoraSettings(rank=0, alpha=0)
"""No adapter: a full fine-tune, or a frozen model (a teacher, a rollout replica's copy)."""


@dataclass(frozen=True)
class OptimizerSettings:
    """``actor_rollout_ref.actor.optim.*`` and ``grad_clip``. ``warmup_steps`` and ``total_steps``
    count training steps (the schedule advances at :meth:`~omni_training.actor.Actor.end_step`)."""

    lr: float
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 0
    total_steps: int | None = None  # training steps; needed by the cosine schedule
    schedule: Literal["constant", "cosine"] = "constant"
    min_lr_ratio: float = 0.0
    grad_clip: float = 1.0

    def __post_init__(self) -> None:
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"Unknown lr schedule {self.schedule!r}; valid: constant, cosine.")
        if self.schedule == "cosine" and not self.total_steps:
            raise ValueError("The cosine schedule needs total_steps (the number of optimizer steps).")


@dataclass(frozen=True)
class ActorSettings:
    """``actor_rollout_ref.actor.*``: the objective and the numerics."""

    loss_mode: str
    policy_loss: PolicyLossConfig
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    entropy_coeff: float = 0.0
    temperature: float = 1.0  # the rollout's sampling temperature: log-probs must use it too
    dtype: Literal["float32", "bfloat16"] = "float32"  # compute dtype; trained weights stay fp32 (precision())
    device: str = "cpu"  # where the model lives ("cpu", "cuda", "cuda:1"); micro-batches move there
    gradient_checkpointing: bool = field(kw_only=True)  # recompute decoder layers in the backward pass
    distillation: DistillationSettings | None = None  # on-policy distillation, when enabled
    # Rollout correction in bypass mode: the old log-probs are the rollout's, and the weights
    # and rejection are computed in each micro-batch's loss (decoupled mode sets the weights
    # and the mask on the micro-batches before the update).
    bypass_correction: CorrectionSettings | None = None
