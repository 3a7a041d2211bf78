"""The verl engine's first training step equals the local engine's (the oracle), on the CPU.

``verl_first_step_harness.py`` (a subprocess: verl chooses its device platform once per
process) runs, for the same four rollouts (text, image+audio, audio, image; fixed response
tokens of lengths 9, 3, 6, 4; advantages +1, -0.5, +0.25, -1.5), fp32 throughout, full
fine-tuning, two micro-batches of two rows and one optimizer step:

- verl's actor worker (``ActorRolloutRefWorker`` with our ``OmniFSDPEngine``, one gloo
  process), driven by verl's ``RayPPOTrainer._compute_old_log_prob`` and ``_update_actor``;
- the local engine's ``Actor``, built and updated as the local trainer does on a first step
  (``on_policy``: old log-probs from the update's own forward, not a separate pass).

Objectives: GSPO aggregated ``seq-mean-token-mean`` (our default), vanilla PPO aggregated
``token-mean``, and vanilla aggregated ``seq-mean-token-sum-norm`` (Dr.GRPO). The two
micro-batches hold different token counts (12 and 10), so a normalisation by the
micro-batch instead of the mini-batch (verl's ``batch_num_tokens`` / ``global_batch_size``,
our ``BatchCounts``) would change the loss and the gradient. verl also multiplies each
rank's loss by the data-parallel size, which FSDP's gradient average divides out: with one
rank here, both are 1, as on the local engine.

Tolerances: log-probs and losses, 1e-4 absolute (they are O(1-10) and fp32 kernel order
moves them by ~1e-6); the grad norm, 1e-4 relative (its scale is the model's and the
batch's, not ours to fix); the update, through the log-probs after the step (1e-4 absolute,
while the step itself moves them by over 1e-2) and one weight matrix's change (within 10%
of lr: Adam's first step is ``lr * g / (|g| + eps)``, so an element whose gradient is near
eps = 1e-8 takes a step that fp32 rounding of ``g`` can move by a fraction of lr).

``seq-mean-token-sum-norm`` (Dr.GRPO) divides by a constant on both engines,
``data.max_response_length`` (10 here; ``actor_rollout_ref.actor.loss_scale_factor``, passed
to verl under that name). Left to verl, it would divide by the padded width of the rows
reaching its loss (unpadded rows in its V1 trainer: each micro-batch's longest response),
and the local engine by the mini-batch's longest response (9): losses and gradients 9/10 of
each other, which this test showed before the constant was set.

The layout otherwise does not enter: token-mean and the seq-mean modes other than ``-norm``
sum over the response mask, whatever its padding.

The fourth variant is vanilla token-mean with rollout correction on (token TIS at 1.5, token
k1 rejection outside 0.5..1.7) and a fixed mismatch injected into the rollout's log-probs:
verl's driver applies verl's correction, the local engine its own, and the rejected tokens,
the rollout_corr/* metrics and the weighted loss (a worked value) must agree.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed --extra gpu)")

sys.path.insert(0, str(Path(__file__).parent))
from test_verl_cpu_harness import run_harness  # noqa: E402

pytestmark = pytest.mark.slow

HARNESS = Path(__file__).with_name("verl_first_step_harness.py")
VARIANTS = [
    ("gspo", "seq-mean-token-mean", False), ("vanilla", "token-mean", False), ("vanilla", "seq-mean-token-sum-norm", False),
    ("vanilla", "token-mean", True),  # rollout correction on, with an injected mismatch
]
TOLERANCE = 1e-4
LR = 1e-4
# The worked loss at the first step: the ratio is 1, nothing is clipped, each token's loss is
# -A of its row; lengths 9, 3, 6, 4, advantages 1, -0.5, 0.25, -1.5.
# seq-mean-token-mean: the mean over rows of -A = -(1 - 0.5 + 0.25 - 1.5) / 4 = 0.1875.
# token-mean: -(9*1 - 3*0.5 + 6*0.25 - 4*1.5) / (9 + 3 + 6 + 4) = -3 / 22.
# seq-mean-token-sum-norm: -(9*1 - 3*0.5 + 6*0.25 - 4*1.5) / 4 rows / horizon 10 = -3 / 40
# (the horizon is data.max_response_length on both engines).
EXPECTED_LOSS = {"seq-mean-token-mean": 0.1875, "token-mean": -3 / 22, "seq-mean-token-sum-norm": -3 / 40}
@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_harness(tmp_path_factory.mktemp("verl-first-step"), harness=HARNESS)


@pytest.fixture(params=VARIANTS, ids=[f"{mode}-{agg}{'-corrected' if corrected else ''}" for mode, agg, corrected in VARIANTS])
def variant(request: pytest.FixtureRequest, report: dict[str, Any]) -> dict[str, Any]:
    (found,) = [v for v in report["variants"] if (v["loss_mode"], v["loss_agg_mode"], v["corrected"]) == request.param]
    return found


def max_abs_diff(a: list[list[float]], b: list[list[float]]) -> float:
    assert [len(row) for row in a] == [len(row) for row in b]
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


def test_both_engines_run_the_same_configured_step(report: dict[str, Any], variant: dict[str, Any]) -> None:
    assert report["rows"] == ["text", "image+audio", "audio", "image"]
    translated = variant["verl_config"]
    assert (translated["loss_mode"], translated["loss_agg_mode"]) == (variant["loss_mode"], variant["loss_agg_mode"])
    assert translated["mixed_precision"] == {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    assert (translated["micro_batch"], translated["mini_batch"], translated["lr"]) == (2, 4, LR)
    assert translated["entropy_coeff"] == 0
    assert (translated["loss_scale_factor"], translated["max_response_length"]) == (10, 10)  # Dr.GRPO constant
    verl, local = variant["verl"], variant["local"]
    # The same parameters train (full fine-tuning, the adapter's freezing on both sides).
    assert verl["trainable"] == local["trainable"] > 0
    assert verl["watched"] == local["watched"]
    # Response lengths as given to the server: 9, 3, 6, 4 tokens.
    assert [len(row) for row in verl["old_log_probs"]] == [9, 3, 6, 4]


def test_old_log_probs_agree(variant: dict[str, Any]) -> None:
    """verl's separate old-log-prob pass against the local update's own forward."""
    assert max_abs_diff(variant["verl"]["old_log_probs"], variant["local"]["old_log_probs"]) <= TOLERANCE


def test_verl_policy_loss_is_the_worked_value(variant: dict[str, Any]) -> None:
    verl = variant["verl"]["metrics"]
    expected = corrected_loss(variant) if variant["corrected"] else EXPECTED_LOSS[variant["loss_agg_mode"]]
    assert verl["actor/pg_loss"] == pytest.approx(expected, abs=1e-6)
    # verl's summed micro-batch losses (its "actor/loss") are the mini-batch loss as well.
    assert verl["actor/loss"] == pytest.approx(verl["actor/pg_loss"], abs=1e-6)
    assert verl["actor/pg_clipfrac"] == variant["local"]["metrics"]["actor/pg_clipfrac"] == 0.0


def test_policy_loss_agrees(variant: dict[str, Any]) -> None:
    verl, local = variant["verl"]["metrics"], variant["local"]["metrics"]
    assert local["actor/pg_loss"] == pytest.approx(verl["actor/pg_loss"], abs=TOLERANCE)


def test_grad_norm_before_clipping_agrees(variant: dict[str, Any]) -> None:
    verl, local = variant["verl"]["metrics"], variant["local"]["metrics"]
    # Above clip_grad = 1: the step compared below is a clipped one on both sides.
    assert verl["actor/grad_norm"] > variant["verl_config"]["clip_grad"]
    assert local["actor/grad_norm"] == pytest.approx(verl["actor/grad_norm"], rel=TOLERANCE)


def test_the_optimizer_step_agrees(variant: dict[str, Any]) -> None:
    verl, local = variant["verl"], variant["local"]
    moved = max_abs_diff(local["new_log_probs"], local["old_log_probs"])
    assert moved > 100 * TOLERANCE  # the step is visible in the log-probs ...
    assert max_abs_diff(verl["new_log_probs"], local["new_log_probs"]) <= TOLERANCE  # ... and the same
    # Adam's first step moves each weight by about lr (plus lr * weight_decay * w).
    assert variant["watched_max_abs_delta"] == pytest.approx(LR, rel=0.01)
    assert variant["watched_max_abs_delta_difference"] <= 0.1 * LR


ADVANTAGES = (1.0, -0.5, 0.25, -1.5)  # per row, as the harness gives them


def corrected_loss(variant: dict[str, Any]) -> float:
    """token-mean at ratio 1 with rollout correction: each kept token's loss is ``-A * w``, its
    weight ``w = min(pi_old / pi_rollout, 1.5)`` = ``min(e^-offset, 1.5)`` for the harness's
    offset of that token; summed over the kept tokens and divided by their count."""
    offsets = (-0.6, -0.3, 0.0, 0.3, 0.6)
    total = count = 0.0
    for row, kept in enumerate(variant["verl"]["kept"]):
        for col, keep in enumerate(kept):
            if keep:
                total += -ADVANTAGES[row] * min(math.exp(-offsets[(3 * row + col) % 5]), 1.5)
                count += 1
    return total / count


def test_rollout_correction_weights_and_rejects_the_same_tokens_on_both_engines(report: dict[str, Any]) -> None:
    """verl's driver and worker against the local step on the same injected mismatch: the same
    tokens rejected (those whose rollout log-prob is 0.6 above the actor's: ratio e^-0.6, under
    the band's 0.5..1.7 in k1 terms), the same weights in the loss (the worked value above, on
    verl's side; the local loss equals it), and every rollout_corr/* metric equal."""
    (variant,) = [v for v in report["variants"] if v["corrected"]]
    verl, local = variant["verl"], variant["local"]
    assert verl["kept"] == local["kept"]
    rejected = [(row, col) for row, kept in enumerate(verl["kept"]) for col, keep in enumerate(kept) if not keep]
    assert rejected and all((3 * row + col) % 5 == 4 for row, col in rejected)
    assert sum(len(kept) for kept in verl["kept"]) - len(rejected) == sum(sum(kept) for kept in verl["kept"])
    assert verl["correction"]["rollout_corr/rollout_is_max"] == pytest.approx(1.5)
    assert verl["correction"]["rollout_corr/rollout_rs_masked_fraction"] > 0
    assert sorted(local["correction"]) == sorted(verl["correction"])
    for key, value in verl["correction"].items():
        assert local["correction"][key] == pytest.approx(value, rel=TOLERANCE, abs=TOLERANCE), key  # perplexities are ~1e3
