"""Offline preference losses (DPO family), selected by ``actor_rollout_ref.actor.omni_loss.loss_type``.

Every loss, ``fn(policy_chosen, policy_rejected, ref_chosen, ref_rejected, settings)`` (each
log-prob ``[P]``, the refs ``None`` for a reference-free loss), maps the sequence log-probs of
``P`` (chosen, rejected) pairs to per-pair losses and implicit rewards. With
``Δ = (πc - ref_c) - (πr - ref_r)`` (sequence log-probs of the policy ``π`` and the frozen
reference ``ref``, see :func:`sequence_log_probs`), ``β`` = ``beta`` and ``ε`` = ``label_smoothing``:

- ``sigmoid``: DPO (https://arxiv.org/abs/2305.18290) with conservative-DPO label smoothing,
  ``-(1-ε) logσ(βΔ) - ε logσ(-βΔ)``, as verl-omni's ``OmniDPOLoss``; at ``ε = 0`` it is TRL's
  ``sigmoid`` (TRL 1.16 applies no smoothing to ``sigmoid``).
- ``ipo``: ``(Δ - 1/(2β))²`` (IPO, https://arxiv.org/abs/2310.12036, eq. 17).
- ``hinge``: ``relu(1 - βΔ)`` (SLiC, https://arxiv.org/abs/2305.10425).
- ``robust``: ``[-(1-ε) logσ(βΔ) + ε logσ(-βΔ)] / (1-2ε)``, unbiased under label noise of
  rate ``ε < 0.5`` (rDPO, https://arxiv.org/abs/2403.00409).
- ``simpo``: reference-free, on length-averaged log-probs: with ``m = πc - πr - γ/β``,
  ``-(1-ε) logσ(βm) - ε logσ(-βm)`` (SimPO, https://arxiv.org/abs/2405.14734; TRL's
  ``CPOTrainer`` with ``loss_type="simpo"`` and ``cpo_alpha=0``).

Rewards are ``β (π - ref)`` per response (``β π`` for ``simpo``), detached. A caller averages
``losses`` over the pairs it holds (:attr:`PreferenceLoss.loss`) and groups metrics by
modality itself (:func:`preference_metrics` with a ``prefix``). Validation reports verl-omni's
``val/*`` names (:func:`validation_metrics`); a run computes each pair's reference log-probs
once (:class:`ReferenceCache`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor

from omni_contracts import Registry, UnknownNameError


@dataclass(frozen=True)
class PreferenceSettings:
    """The loss settings, verl-omni's names under ``actor_rollout_ref.actor.omni_loss``.

    Args:
        loss_type: the registered loss (:data:`PREFERENCE_LOSSES`).
        beta: inverse temperature of the implicit reward (DPO's β; IPO's τ is ``beta``);
            must be > 0.
        label_smoothing: the assumed rate of flipped labels ``ε``, in ``[0, 1)``; ``robust``
            needs ``ε < 0.5``. ``hinge`` and ``ipo`` ignore it.
        average_log_prob: sequence log-probs are per-token means instead of sums (the
            caller's :func:`sequence_log_probs`); ``simpo`` requires it.
        simpo_gamma: SimPO's target reward margin γ (TRL ``CPOConfig.simpo_gamma``).
    """

    loss_type: str = "sigmoid"
    beta: float = 0.1
    label_smoothing: float = 0.0
    average_log_prob: bool = False
    simpo_gamma: float = 0.5

    def __post_init__(self) -> None:
        errors = []
        if not self.beta > 0:
            errors.append(f"beta must be > 0, got {self.beta}.")
        if not 0.0 <= self.label_smoothing < 1.0:
            errors.append(f"label_smoothing must be in [0, 1), got {self.label_smoothing}.")
        if self.loss_type == "robust" and self.label_smoothing >= 0.5:
            errors.append(_robust_message(self.label_smoothing))
        if self.loss_type == "simpo" and not self.average_log_prob:
            errors.append(_simpo_message())
        try:
            PREFERENCE_LOSSES.get(self.loss_type)
        except UnknownNameError as miss:
            errors.append(str(miss))
        if errors:
            raise ValueError("Invalid omni_loss settings:\n- " + "\n- ".join(errors))


@dataclass(frozen=True)
class PreferenceLoss:
    losses: Tensor  # [P], differentiable
    chosen_rewards: Tensor  # [P], detached
    rejected_rewards: Tensor  # [P], detached

    @property
    def loss(self) -> Tensor:
        """The mean over the pairs (scalar, differentiable)."""
        return self.losses.mean()


class PreferenceLossFn(Protocol):
    def __call__(
        self,
        policy_chosen: Tensor,
        policy_rejected: Tensor,
        ref_chosen: Tensor | None,
        ref_rejected: Tensor | None,
        settings: PreferenceSettings,
    ) -> PreferenceLoss: ...


PREFERENCE_LOSSES: Registry[str, PreferenceLossFn] = Registry("preference loss_type")
REFERENCE_FREE: frozenset[str] = frozenset({"simpo"})
"""Losses that take no reference log-probs (the caller skips the reference forward)."""


def register_preference_loss(name: str) -> Callable[[PreferenceLossFn], PreferenceLossFn]:
    """Decorator: register a preference loss as ``actor.omni_loss.loss_type=name``."""
    return PREFERENCE_LOSSES.register(name)


def get_preference_loss(name: str) -> PreferenceLossFn:
    """The loss registered as ``name``; a miss lists the registered ones (``UnknownNameError``,
    a ``ValueError``)."""
    return PREFERENCE_LOSSES.get(name)


def preference_loss(
    policy_chosen: Tensor,  # [P]
    policy_rejected: Tensor,  # [P]
    ref_chosen: Tensor | None,  # [P]
    ref_rejected: Tensor | None,  # [P]
    settings: PreferenceSettings,
) -> PreferenceLoss:
    """The loss ``settings.loss_type`` names, applied to the pairs."""
    return get_preference_loss(settings.loss_type)(
        policy_chosen=policy_chosen, policy_rejected=policy_rejected,
        ref_chosen=ref_chosen, ref_rejected=ref_rejected, settings=settings,
    )


def sequence_log_probs(token_log_probs: Tensor, mask: Tensor, *, average: bool) -> Tensor:
    """Per-sequence log-probs ``[B]`` from token log-probs ``[B, T]`` and the response mask
    ``[B, T]`` aligned with them (1 = a scored response token): the masked sum, or with
    ``average`` the masked mean (an empty row divides by 1). Values under a zero mask never
    leak in, not even ``-inf``.

    Raises:
        ValueError: the shapes differ.
    """
    if token_log_probs.shape != mask.shape:
        raise ValueError(
            f"token_log_probs {tuple(token_log_probs.shape)} and mask {tuple(mask.shape)} must have one shape; "
            "give the mask aligned with the log-probs (no label shift)."
        )
    keep = mask.bool()
    total = torch.where(keep, token_log_probs, torch.zeros_like(token_log_probs)).sum(dim=-1)
    if not average:
        return total
    return total / keep.sum(dim=-1).clamp(min=1).to(total.dtype)


def preference_metrics(
    out: PreferenceLoss,
    policy_chosen: Tensor,  # [P]
    policy_rejected: Tensor,  # [P]
    prefix: str = "",
) -> dict[str, float]:
    """Batch means under TRL's ``DPOTrainer`` names, each behind ``prefix`` (e.g. ``"eval_"``
    or a modality): ``loss``, ``rewards/chosen``, ``rewards/rejected``, ``rewards/accuracies``
    (share of pairs whose chosen reward is strictly higher), ``rewards/margins``,
    ``logps/chosen`` and ``logps/rejected`` (the sequence log-probs the loss was given)."""
    chosen, rejected = out.chosen_rewards.detach(), out.rejected_rewards.detach()
    values = torch.stack([
        out.losses.detach().mean(),
        chosen.mean(),
        rejected.mean(),
        (chosen > rejected).to(chosen.dtype).mean(),
        (chosen - rejected).mean(),
        policy_chosen.detach().to(chosen.dtype).mean(),
        policy_rejected.detach().to(chosen.dtype).mean(),
    ]).tolist()
    names = (
        "loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
        "logps/chosen", "logps/rejected",
    )
    return {prefix + name: value for name, value in zip(names, values, strict=True)}


class KeyedPair(Protocol):
    """A pair with a key of its own (its row), under which its reference log-probs are cached."""

    @property
    def key(self) -> int: ...


P = TypeVar("P", bound=KeyedPair)


class ReferenceCache(dict[int, tuple[float, float]]):
    """Each pair's reference sequence log-probs (chosen, rejected) by pair key: computed the
    first time the pair is seen, never again."""

    def __init__(self, reference_free: bool) -> None:
        super().__init__()
        self.reference_free = reference_free

    def lookup(
        self, pairs: Sequence[P], score: Callable[[list[P]], Tensor]
    ) -> tuple[Tensor, Tensor] | tuple[None, None]:
        """The pairs' (chosen, rejected) reference log-probs; ``score`` gives the sequence
        log-probs of the pairs not cached yet, each pair's chosen then rejected row (``None``
        for a reference-free loss)."""
        if self.reference_free:
            return None, None
        wanted = list({p.key: p for p in pairs if p.key not in self}.values())  # a batch may repeat a pair
        if wanted:
            scores = score(wanted)
            for pair, c, r in zip(wanted, scores[0::2].tolist(), scores[1::2].tolist(), strict=True):
                self[pair.key] = (c, r)
        values = torch.tensor([self[p.key] for p in pairs], dtype=torch.float32)
        return values[:, 0], values[:, 1]


def validation_metrics(
    loss_fn: PreferenceLossFn, settings: PreferenceSettings, parts: dict[str, tuple[Any, ...]]
) -> dict[str, float]:
    """verl-omni's ``val/*`` (overall) and ``val/<modality>/*`` from each modality's (policy
    chosen, policy rejected, reference chosen, reference rejected) sequence log-probs."""
    def joined(k: int) -> Tensor | None:
        values = [p[k] for p in parts.values()]
        return None if values[0] is None else torch.cat(values)

    metrics: dict[str, float] = {}
    for name, (chosen, rejected, ref_c, ref_r) in [("", tuple(joined(k) for k in range(4))),
                                                   *((f"{m}/", p) for m, p in parts.items())]:
        out = loss_fn(chosen, rejected, ref_c, ref_r, settings)
        margins = out.chosen_rewards - out.rejected_rewards
        metrics.update({
            f"val/{name}num_samples": float(len(chosen)),
            f"val/{name}dpo_loss": float(out.losses.mean()),
            f"val/{name}reward_accuracy": float((out.chosen_rewards > out.rejected_rewards).float().mean()),
            f"val/{name}reward_margin": float(margins.mean()),
            f"val/{name}chosen_rewards": float(out.chosen_rewards.mean()),
            f"val/{name}rejected_rewards": float(out.rejected_rewards.mean()),
        })
    return metrics


def _check_pairs(name: str, **tensors: Tensor | None) -> None:
    shapes = {key: tuple(t.shape) for key, t in tensors.items() if t is not None}
    if len(set(shapes.values())) > 1 or any(len(shape) != 1 for shape in shapes.values()):
        raise ValueError(f"{name}: every log-prob must be one value per pair, shape [P]; got {shapes}.")
    if any(shape[0] == 0 for shape in shapes.values()):
        raise ValueError(f"{name}: no pairs to score (P = 0).")


def _log_ratios(
    name: str, policy_chosen: Tensor, policy_rejected: Tensor, ref_chosen: Tensor | None, ref_rejected: Tensor | None
) -> tuple[Tensor, Tensor]:
    """``(πc - ref_c, πr - ref_r)``, each ``[P]``."""
    _check_pairs(
        name, policy_chosen=policy_chosen, policy_rejected=policy_rejected,
        ref_chosen=ref_chosen, ref_rejected=ref_rejected,
    )
    if ref_chosen is None or ref_rejected is None:
        raise ValueError(
            f"The {name!r} preference loss needs the reference model's log-probs of both responses "
            f"(got ref_chosen={_given(ref_chosen)}, ref_rejected={_given(ref_rejected)}); compute them, or "
            "use a reference-free loss_type such as 'simpo'."
        )
    return policy_chosen - ref_chosen, policy_rejected - ref_rejected


def _given(t: Tensor | None) -> str:
    return "None" if t is None else "a tensor"


def _result(losses: Tensor, chosen_scores: Tensor, rejected_scores: Tensor, beta: float) -> PreferenceLoss:
    return PreferenceLoss(
        losses=losses,
        chosen_rewards=beta * chosen_scores.detach(),
        rejected_rewards=beta * rejected_scores.detach(),
    )


def _smoothed_logistic(logits: Tensor, eps: float) -> Tensor:
    """``-(1-ε) logσ(x) - ε logσ(-x)``: the logistic loss against a label that is right with
    probability ``1-ε``."""
    return -F.logsigmoid(logits) * (1 - eps) - F.logsigmoid(-logits) * eps


@register_preference_loss("sigmoid")
def sigmoid_loss(
    policy_chosen: Tensor,  # [P]
    policy_rejected: Tensor,  # [P]
    ref_chosen: Tensor | None,  # [P]
    ref_rejected: Tensor | None,  # [P]
    settings: PreferenceSettings,
) -> PreferenceLoss:
    """DPO: ``-(1-ε) logσ(βΔ) - ε logσ(-βΔ)`` (conservative DPO when ``ε > 0``)."""
    chosen, rejected = _log_ratios("sigmoid", policy_chosen, policy_rejected, ref_chosen, ref_rejected)
    losses = _smoothed_logistic(settings.beta * (chosen - rejected), settings.label_smoothing)
    return _result(losses, chosen, rejected, settings.beta)


@register_preference_loss("ipo")
def ipo_loss(
    policy_chosen: Tensor,  # [P]
    policy_rejected: Tensor,  # [P]
    ref_chosen: Tensor | None,  # [P]
    ref_rejected: Tensor | None,  # [P]
    settings: PreferenceSettings,
) -> PreferenceLoss:
    """IPO: ``(Δ - 1/(2β))²`` on the sequence log-probs it is given.

    With summed log-probs (``average_log_prob=false``) this is verl-omni's ``ipo``; with
    per-token means (``average_log_prob=true``) it is TRL's ``ipo`` (TRL >= 1.13 divides each
    log-ratio by its completion length), whose rewards stay on summed log-probs.
    """
    chosen, rejected = _log_ratios("ipo", policy_chosen, policy_rejected, ref_chosen, ref_rejected)
    losses = (chosen - rejected - 1 / (2 * settings.beta)) ** 2
    return _result(losses, chosen, rejected, settings.beta)


@register_preference_loss("hinge")
def hinge_loss(
    policy_chosen: Tensor,  # [P]
    policy_rejected: Tensor,  # [P]
    ref_chosen: Tensor | None,  # [P]
    ref_rejected: Tensor | None,  # [P]
    settings: PreferenceSettings,
) -> PreferenceLoss:
    """SLiC hinge: ``relu(1 - βΔ)``."""
    chosen, rejected = _log_ratios("hinge", policy_chosen, policy_rejected, ref_chosen, ref_rejected)
    losses = torch.relu(1 - settings.beta * (chosen - rejected))
    return _result(losses, chosen, rejected, settings.beta)


@register_preference_loss("robust")
def robust_loss(
    policy_chosen: Tensor,  # [P]
    policy_rejected: Tensor,  # [P]
    ref_chosen: Tensor | None,  # [P]
    ref_rejected: Tensor | None,  # [P]
    settings: PreferenceSettings,
) -> PreferenceLoss:
    """Robust DPO: ``[-(1-ε) logσ(βΔ) + ε logσ(-βΔ)] / (1-2ε)``.

    Raises:
        ValueError: ``label_smoothing >= 0.5`` (the estimator's divisor is not positive).
    """
    eps = settings.label_smoothing
    if eps >= 0.5:
        raise ValueError(_robust_message(eps))
    chosen, rejected = _log_ratios("robust", policy_chosen, policy_rejected, ref_chosen, ref_rejected)
    logits = settings.beta * (chosen - rejected)
    losses = (-(1 - eps) * F.logsigmoid(logits) + eps * F.logsigmoid(-logits)) / (1 - 2 * eps)
    return _result(losses, chosen, rejected, settings.beta)


@register_preference_loss("simpo")
def simpo_loss(
    policy_chosen: Tensor,  # [P], per-token mean log-probs
    policy_rejected: Tensor,  # [P], per-token mean log-probs
    ref_chosen: Tensor | None,  # must be None
    ref_rejected: Tensor | None,  # must be None
    settings: PreferenceSettings,
) -> PreferenceLoss:
    """SimPO, reference-free: ``-(1-ε) logσ(βm) - ε logσ(-βm)`` with ``m = πc - πr - γ/β``;
    rewards ``β π``. The log-probs must be length-averaged (``average_log_prob=true``), as
    SimPO's margin γ is per token.

    Raises:
        ValueError: reference log-probs were given, or ``settings.average_log_prob`` is false.
    """
    _check_pairs("simpo", policy_chosen=policy_chosen, policy_rejected=policy_rejected)
    if ref_chosen is not None or ref_rejected is not None:
        raise ValueError(
            "The 'simpo' preference loss is reference-free: pass ref_chosen=None and ref_rejected=None, "
            "and skip the reference forward."
        )
    if not settings.average_log_prob:
        raise ValueError(_simpo_message())
    margin = policy_chosen - policy_rejected - settings.simpo_gamma / settings.beta
    losses = _smoothed_logistic(settings.beta * margin, settings.label_smoothing)
    return _result(losses, policy_chosen, policy_rejected, settings.beta)


def _robust_message(eps: float) -> str:
    return (
        f"loss_type='robust' needs label_smoothing < 0.5 (it divides by 1 - 2*label_smoothing), got {eps}; "
        "above 0.5 the labels would be more often wrong than right: swap chosen and rejected instead."
    )


def _simpo_message() -> str:
    return (
        "loss_type='simpo' needs average_log_prob=true: its margin simpo_gamma is per token, so the "
        "sequence log-probs must be per-token means (as TRL's CPOTrainer computes them)."
    )

