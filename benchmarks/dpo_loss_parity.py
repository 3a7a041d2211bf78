"""Our preference losses (``omni_training.preference``) vs TRL's own loss code, on the same log-probs.

    UV_PROJECT_ENVIRONMENT=/tmp/benchvenv uv run --locked --group bench python benchmarks/dpo_loss_parity.py [--pairs 64]

A parity check, not a timing: for each loss it feeds one random batch of token log-probs (or
logits) to TRL and to us, asserts that the per-pair losses, the mean loss, every metric TRL
logs for it and the gradient with respect to the token log-probs (logits for SimPO) are
equal to ``--tol`` (absolute and relative), and prints the largest absolute difference of each. The raw numbers go to
``outputs/benchmarks/dpo_loss_parity.json`` (``--out``).

TRL's side runs TRL's methods on a stand-in for the trainer, so no model, tokenizer or
dataset is needed:

- ``DPOTrainer._compute_loss`` (TRL 1.16 has no separate loss function): the stand-in model
  returns the token log-probs TRL's fused LM head would (0 outside the completion), the
  reference model its own; TRL sums them, takes the log-ratios, the loss and its metrics.
  TRL returns only the mean loss, so per-pair losses come from one call per pair.
- ``CPOTrainer.get_batch_loss_metrics`` with ``cpo_alpha=0`` (trl.experimental.cpo): for
  SimPO its own ``concatenated_forward`` and ``get_batch_logps`` average the token log-probs
  of stand-in logits; for the two losses TRL's DPOTrainer no longer has in our form
  (conservative-DPO smoothing, IPO on sums) its ``cpo_loss`` is fed the DPO log-ratios.

Everything runs in float64 by default. ``--dtype float32`` passes too, on the relative
tolerance only: IPO's length normalisation divides in another order on the two sides (TRL:
the log-ratio by the length; ours: each sum by it; 7.6e-6 on per-pair losses up to 108), and
SimPO's token log-probs come from TRL's ``selective_log_softmax`` on its side (1.9e-6 on
losses up to 9); the other losses are bit-equal in both dtypes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import types
import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch

from omni_training.preference import (
    PreferenceLoss,
    PreferenceSettings,
    preference_loss,
    preference_metrics,
    sequence_log_probs,
)

METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected")


@dataclass
class Batch:
    """``2P`` rows, the ``P`` chosen first (TRL's order), ``L`` positions, the first a prompt."""

    completion_mask: torch.Tensor  # [2P, L], 1 on completion tokens
    policy: torch.Tensor  # [2P, L - 1] token log-probs at the shifted positions, 0 elsewhere
    reference: torch.Tensor  # [2P, L - 1]
    logits: torch.Tensor  # [2P, L, V] (SimPO's side)
    input_ids: torch.Tensor  # [2P, L]

    @property
    def shift_mask(self) -> torch.Tensor:
        return self.completion_mask[:, 1:]


def make_batch(pairs: int, length: int, vocab: int, dtype: torch.dtype, seed: int) -> Batch:
    g = torch.Generator().manual_seed(seed)
    rows = 2 * pairs
    prompt = torch.randint(1, length // 4, (rows,), generator=g)
    completion = torch.randint(1, length // 2, (rows,), generator=g)
    pos = torch.arange(length)[None]
    completion_mask = ((pos >= prompt[:, None]) & (pos < (prompt + completion)[:, None])).long()
    shift = completion_mask[:, 1:].bool()
    reference = -torch.empty(rows, length - 1, dtype=dtype).exponential_(1 / 1.5, generator=g)
    # The policy near the reference for some pairs, far from it for others (per pair, not per row).
    spread = torch.tensor([0.01, 0.3, 2.0], dtype=dtype)[torch.randint(0, 3, (pairs,), generator=g)].repeat(2)
    policy = (reference + spread[:, None] * torch.randn(rows, length - 1, dtype=dtype, generator=g)).clamp(max=0)
    zero = torch.zeros((), dtype=dtype)
    logits = torch.randn(rows, length, vocab, dtype=dtype, generator=g) * 3
    return Batch(
        completion_mask=completion_mask,
        policy=torch.where(shift, policy, zero),
        reference=torch.where(shift, reference, zero),
        logits=logits,
        input_ids=torch.randint(1, vocab, (rows, length), generator=g),
    )


def accelerator() -> types.SimpleNamespace:
    return types.SimpleNamespace(
        device=torch.device("cpu"), gather=lambda x: x, gather_for_metrics=lambda x: x, unwrap_model=lambda m: m
    )


class StandInModel(torch.nn.Module):
    """What TRL's fused LM head returns for a batch: token log-probs and per-token statistics."""

    is_gradient_checkpointing = False

    def __init__(self, log_probs: torch.Tensor) -> None:
        super().__init__()
        self.log_probs = log_probs

    def forward(self, **_: object) -> types.SimpleNamespace:
        zeros = torch.zeros_like(self.log_probs.detach())
        return types.SimpleNamespace(
            log_probs=self.log_probs, entropy=zeros, mean_logits=zeros, is_top1=zeros.bool(), aux_loss=None
        )


def trl_dpo(batch: Batch, rows: torch.Tensor, loss_type: str, beta: float, eps: float) -> tuple[float, dict[str, float], torch.Tensor]:
    """TRL 1.16 ``DPOTrainer._compute_loss`` on ``rows``: (loss, metrics, d loss / d policy token log-probs)."""
    from trl import DPOTrainer

    policy = batch.policy[rows].clone().requires_grad_(True)
    trainer = types.SimpleNamespace(
        model=StandInModel(policy), ref_model=StandInModel(batch.reference[rows]), accelerator=accelerator(),
        args=types.SimpleNamespace(gradient_checkpointing_kwargs=None), aux_loss_enabled=False, ld_alpha=None,
        precompute_ref_logps=False, f_divergence_type="reverse_kl", loss_types=[loss_type], loss_weights=[1.0],
        beta=beta, label_smoothing=eps, use_weighting=False, _metrics={"train": defaultdict(list)},
        _total_train_tokens=0, _tp_size=1,
    )
    inputs = {
        "input_ids": batch.input_ids[rows], "attention_mask": torch.ones_like(batch.input_ids[rows]),
        "completion_mask": batch.completion_mask[rows],
    }
    loss = DPOTrainer._compute_loss(trainer, trainer.model, inputs, return_outputs=False)
    loss.backward()
    metrics = {key: trainer._metrics["train"][key][-1] for key in METRICS}
    # TRL sums every position and relies on the fused head to return constant 0 outside the
    # completion; only completion positions carry a gradient to the model.
    return float(loss.detach()), metrics, policy.grad * batch.shift_mask[rows]  # type: ignore[operator]


def cpo_trainer(loss_type: str, beta: float, eps: float, forward: Callable[..., Any] | None = None) -> types.SimpleNamespace:
    from trl.experimental.cpo import CPOTrainer

    trainer = types.SimpleNamespace(
        accelerator=accelerator(), aux_loss_enabled=False, is_encoder_decoder=False, pad_token_id=0, cpo_alpha=0.0,
        alpha=0.0, loss_type=loss_type, beta=beta, label_smoothing=eps, simpo_gamma=0.5,
        concatenated_inputs=CPOTrainer.concatenated_inputs, get_batch_logps=CPOTrainer.get_batch_logps,
    )
    trainer.cpo_loss = types.MethodType(CPOTrainer.cpo_loss, trainer)
    trainer.concatenated_forward = forward or types.MethodType(CPOTrainer.concatenated_forward, trainer)
    trainer.get_batch_loss_metrics = types.MethodType(CPOTrainer.get_batch_loss_metrics, trainer)
    return trainer


@dataclass
class Case:
    name: str
    trl_side: str
    settings: PreferenceSettings
    run: Callable[[Batch, PreferenceSettings], dict[str, Any]]


def ours_on_tokens(batch: Batch, settings: PreferenceSettings, *, average: bool) -> tuple[PreferenceLoss, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Our loss from the token log-probs: (result, chosen and rejected sequence log-probs, d loss / d policy tokens)."""
    pairs = batch.policy.shape[0] // 2
    tokens = batch.policy.clone().requires_grad_(True)
    policy = sequence_log_probs(tokens, batch.shift_mask, average=average)
    reference = sequence_log_probs(batch.reference, batch.shift_mask, average=average)
    out = preference_loss(
        policy_chosen=policy[:pairs], policy_rejected=policy[pairs:],
        ref_chosen=reference[:pairs], ref_rejected=reference[pairs:], settings=settings,
    )
    out.loss.backward()
    return out, policy[:pairs].detach(), policy[pairs:].detach(), tokens.grad  # type: ignore[return-value]


def dpo_case(batch: Batch, settings: PreferenceSettings) -> dict[str, Any]:
    """Ours on summed log-probs (``ipo``: per-token means for the loss, as TRL's ipo; TRL's rewards
    and logps stay on sums, so ours are taken from the summed call) vs ``DPOTrainer``."""
    pairs = batch.policy.shape[0] // 2
    loss_type, beta, eps = settings.loss_type, settings.beta, settings.label_smoothing
    out, pc, pr, grad = ours_on_tokens(batch, settings, average=settings.average_log_prob)
    if settings.average_log_prob:
        summed, pc, pr, _ = ours_on_tokens(batch, PreferenceSettings(loss_type=loss_type, beta=beta), average=False)
        out = PreferenceLoss(out.losses, summed.chosen_rewards, summed.rejected_rewards)
    theirs_loss, theirs_metrics, theirs_grad = trl_dpo(batch, torch.arange(2 * pairs), loss_type, beta, eps)
    per_pair = [trl_dpo(batch, torch.tensor([i, pairs + i]), loss_type, beta, eps)[0] for i in range(pairs)]
    return compare(out, pc, pr, grad, torch.tensor(per_pair, dtype=out.losses.dtype), theirs_loss, theirs_metrics, theirs_grad)


def cpo_on_ratios_case(batch: Batch, settings: PreferenceSettings) -> dict[str, Any]:
    """Ours vs ``CPOTrainer.cpo_loss`` fed the DPO log-ratios ``π - ref`` as its log-probs (its
    ``logps/*`` are then the mean log-ratios, and so are ours here)."""
    pairs = batch.policy.shape[0] // 2
    out, _, _, grad = ours_on_tokens(batch, settings, average=False)
    tokens = batch.policy.clone().requires_grad_(True)
    ratios = (
        sequence_log_probs(tokens, batch.shift_mask, average=False)
        - sequence_log_probs(batch.reference, batch.shift_mask, average=False)
    )
    chosen, rejected = ratios[:pairs], ratios[pairs:]
    dummy = torch.zeros(1, dtype=ratios.dtype)
    forward = lambda *_: (chosen, rejected, dummy, dummy, torch.zeros((), dtype=ratios.dtype))  # noqa: E731
    trainer = cpo_trainer(settings.loss_type if settings.loss_type == "ipo" else "sigmoid", settings.beta,
                          settings.label_smoothing, forward)
    per_pair = trainer.cpo_loss(chosen, rejected)[0].detach()
    loss, metrics = trainer.get_batch_loss_metrics(None, {})
    loss.backward()
    return compare(out, chosen.detach(), rejected.detach(), grad, per_pair, float(loss.detach()), metrics, tokens.grad)


def simpo_case(batch: Batch, settings: PreferenceSettings) -> dict[str, Any]:
    """Ours on per-token means of the logits' log-probs vs ``CPOTrainer`` (loss_type simpo)
    through its own ``concatenated_forward`` and ``get_batch_logps``."""
    pairs = batch.policy.shape[0] // 2
    labels = batch.input_ids.masked_fill(batch.completion_mask == 0, -100)
    mask = labels[:, 1:] != -100

    logits = batch.logits.clone().requires_grad_(True)
    tokens = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, labels[:, 1:].clamp(min=0)[..., None])[..., 0]
    seq = sequence_log_probs(tokens, mask, average=True)
    out = preference_loss(policy_chosen=seq[:pairs], policy_rejected=seq[pairs:], ref_chosen=None, ref_rejected=None,
                          settings=settings)
    out.loss.backward()

    theirs_logits = batch.logits.clone().requires_grad_(True)
    model = lambda *_, **__: types.SimpleNamespace(logits=theirs_logits)  # noqa: E731
    trainer = cpo_trainer("simpo", settings.beta, settings.label_smoothing)
    trainer.simpo_gamma = settings.simpo_gamma
    halves = {
        f"{side}_{key}": value[rows]
        for side, rows in (("chosen", slice(0, pairs)), ("rejected", slice(pairs, None)))
        for key, value in (("input_ids", batch.input_ids), ("attention_mask", torch.ones_like(batch.input_ids)),
                           ("labels", labels))
    }
    theirs_chosen, theirs_rejected = trainer.concatenated_forward(model, halves)[:2]
    per_pair = trainer.cpo_loss(theirs_chosen, theirs_rejected)[0].detach()
    loss, metrics = trainer.get_batch_loss_metrics(model, halves)
    loss.backward()
    return compare(out, seq[:pairs].detach(), seq[pairs:].detach(), logits.grad, per_pair, float(loss.detach()), metrics,
                   theirs_logits.grad)  # type: ignore[arg-type]


def compare(
    out: PreferenceLoss, pc: torch.Tensor, pr: torch.Tensor, grad: torch.Tensor,
    theirs_pairs: torch.Tensor, theirs_loss: float, theirs_metrics: dict[str, float], theirs_grad: torch.Tensor,
) -> dict[str, Any]:
    ours = preference_metrics(out, pc, pr)
    diffs = {
        "losses (per pair)": float((out.losses.detach() - theirs_pairs).abs().max()),
        "loss": abs(ours["loss"] - theirs_loss),
        **{key: abs(ours[key] - theirs_metrics[key]) for key in METRICS},
        "grad": float((grad - theirs_grad).abs().max()),
    }
    scale = {
        "losses (per pair)": float(theirs_pairs.abs().max()), "loss": abs(theirs_loss),
        **{key: abs(theirs_metrics[key]) for key in METRICS}, "grad": float(theirs_grad.abs().max()),
    }
    return {"diffs": diffs, "scale": scale, "loss": ours["loss"], "theirs_loss": theirs_loss}


CASES = [
    Case("sigmoid b=0.1", "DPOTrainer sigmoid", PreferenceSettings(beta=0.1), dpo_case),
    Case("sigmoid b=0.5", "DPOTrainer sigmoid", PreferenceSettings(beta=0.5), dpo_case),
    Case("hinge b=0.1", "DPOTrainer hinge", PreferenceSettings(loss_type="hinge", beta=0.1), dpo_case),
    Case("ipo b=0.1, avg", "DPOTrainer ipo", PreferenceSettings(loss_type="ipo", beta=0.1, average_log_prob=True), dpo_case),
    Case("robust b=0.1 e=0.1", "DPOTrainer robust", PreferenceSettings(loss_type="robust", label_smoothing=0.1), dpo_case),
    Case("robust b=0.5 e=0.3", "DPOTrainer robust",
         PreferenceSettings(loss_type="robust", beta=0.5, label_smoothing=0.3), dpo_case),
    Case("sigmoid b=0.1 e=0.1 (cDPO)", "CPOTrainer sigmoid on log-ratios",
         PreferenceSettings(label_smoothing=0.1), cpo_on_ratios_case),
    Case("ipo b=0.1, sums", "CPOTrainer ipo on log-ratios", PreferenceSettings(loss_type="ipo"), cpo_on_ratios_case),
    Case("simpo b=2 g=0.5", "CPOTrainer simpo, cpo_alpha=0",
         PreferenceSettings(loss_type="simpo", beta=2.0, average_log_prob=True), simpo_case),
    Case("simpo b=2 g=1 e=0.1", "CPOTrainer simpo, cpo_alpha=0",
         PreferenceSettings(loss_type="simpo", beta=2.0, simpo_gamma=1.0, label_smoothing=0.1, average_log_prob=True),
         simpo_case),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--length", type=int, default=96, help="positions per row (prompt + completion + padding)")
    parser.add_argument("--vocab", type=int, default=64, help="logit width for SimPO's side")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/dpo_loss_parity.json"))
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*trl.experimental.*")
    batch = make_batch(args.pairs, args.length, args.vocab, getattr(torch, args.dtype), args.seed)
    print(f"{args.pairs} pairs, {args.length} positions, {args.dtype}, TRL {version('trl')}, torch {version('torch')}; "
          f"max |ours - TRL| per quantity (tolerance {args.tol:g}, absolute and relative)")
    columns = ("losses (per pair)", "loss", *METRICS, "grad")
    print(f"{'ours':<28}{'TRL 1.16':<34}" + "".join(f"{c.replace('rewards/', 'r/'):>18}" for c in columns))
    results, failures = [], []
    for case in CASES:
        result = case.run(batch, case.settings)
        for key, diff in result["diffs"].items():
            if diff > args.tol * max(1.0, result["scale"][key]):
                failures.append(f"{case.name} {key}: {diff:.3g}")
        print(f"{case.name:<28}{case.trl_side:<34}" + "".join(f"{result['diffs'][c]:>18.2e}" for c in columns))
        results.append({"case": case.name, "trl_side": case.trl_side, "settings": vars(case.settings), **result})

    # TRL 1.16's DPOTrainer sigmoid ignores label_smoothing; ours applies conservative DPO's.
    smoothed = PreferenceSettings(label_smoothing=0.1)
    ours_smoothed = ours_on_tokens(batch, smoothed, average=False)[0].loss.item()
    trl_sigmoid = trl_dpo(batch, torch.arange(2 * args.pairs), "sigmoid", 0.1, 0.1)[0]
    print(f"not equal, by design: sigmoid with label_smoothing 0.1, ours (cDPO) {ours_smoothed:.6f} vs "
          f"DPOTrainer sigmoid {trl_sigmoid:.6f} (TRL 1.16 applies no smoothing to sigmoid)")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "dpo_loss_parity", "pairs": args.pairs, "length": args.length, "vocab": args.vocab,
        "dtype": args.dtype, "tol": args.tol, "seed": args.seed, "cases": results,
        "sigmoid_label_smoothing_differs": {"ours": ours_smoothed, "trl_dpo_sigmoid": trl_sigmoid},
        "machine": platform.platform(), "cpus": os.cpu_count(),
        "versions": {p: version(p) for p in ("trl", "torch", "transformers")},
    }, indent=1))
    print(f"raw numbers: {args.out}")
    if failures:
        raise SystemExit("parity FAILED:\n" + "\n".join(failures))
    print(f"parity: all {len(CASES)} cases equal to {args.tol:g}")


if __name__ == "__main__":
    main()
