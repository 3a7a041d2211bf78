"""``omni_training.rollout_correction`` against verl 0.9.1's ``rollout_corr_helper`` on generated
corpora: ragged masks (one-token, full and empty rows), log-ratios from near-on-policy to past
verl's exp bound, both IS levels, TIS and IcePop thresholds, batch normalisation, and every
rejection mode alone and chained. Weights, masks and every metric must agree. verl's own test
cases follow, on ours."""

from __future__ import annotations

import itertools
import math
import re
from types import ModuleType

import pytest
import torch

from omni_training.rollout_correction import CorrectionSettings, Threshold, correct, importance_weights


def corpus(seed: int, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    rows, width = 3 + seed % 5, 4 + seed % 7
    log_ratio = torch.randn(rows, width, generator=generator, dtype=torch.float64) * scale
    lengths = torch.randint(1, width + 1, (rows,), generator=generator)
    lengths[0], lengths[-1] = 1, width  # a one-token response and a full one
    mask = (torch.arange(width) < lengths[:, None]).to(torch.float64)
    log_ratio = torch.where(mask.bool(), log_ratio, torch.full_like(log_ratio, 7.0))  # padding must not leak
    return log_ratio, mask


CASES = list(itertools.product(
    range(6), (0.01, 0.3, 2.0, 30.0), ("token", "sequence"), (2.0, "3.0", 1.5, "0.5_5.0", "0.8_1.25"), (False, True),
))


@pytest.mark.parametrize(("seed", "scale", "level", "threshold", "normalize"), CASES)
def test_weights_and_metrics_equal_verls(
    verl_rollout_corr: ModuleType, seed: int, scale: float, level: str, threshold: float | str, normalize: bool
) -> None:
    log_ratio, mask = corpus(seed, scale)
    ours = importance_weights(log_ratio, mask, level=level, threshold=threshold, batch_normalize=normalize)
    try:
        weights, metrics = verl_rollout_corr.compute_rollout_correction_weights(
            log_ratio, mask, rollout_is=level, rollout_is_threshold=threshold, rollout_is_batch_normalize=normalize,
        )
    except ZeroDivisionError:  # verl 0.9.1, every weight outside an IcePop band: 1 / 0 in its ESS
        assert not ours.weights.any() and ours.metrics["rollout_is_eff_sample_size"] == 0
        return
    torch.testing.assert_close(ours.weights, weights, rtol=1e-6, atol=1e-6)
    assert sorted(ours.metrics) == sorted(metrics)
    for key, value in metrics.items():
        assert math.isclose(ours.metrics[key], float(value), rel_tol=1e-6, abs_tol=1e-6), (key, ours.metrics[key], value)


@pytest.mark.parametrize("spec", [True, "", "a_b", "5.0_0.5", 0, -1.0, "0_2", "nan", float("nan"), "inf", "0.5_nan"])
def test_a_bad_threshold_is_refused_by_value(spec: object) -> None:
    with pytest.raises(ValueError, match="rollout_is_threshold="):
        Threshold.parse(spec)  # type: ignore[arg-type]


def test_a_given_threshold_is_checked_even_without_importance_sampling() -> None:
    """``rollout_is_threshold=nan`` alone was accepted on both engines and every step's loss was NaN."""
    from omni_training.rollout_correction import CorrectionSettings

    with pytest.raises(ValueError, match="finite bounds"):
        CorrectionSettings(rollout_is=None, rollout_is_threshold="nan")


def test_an_unknown_level_and_an_empty_batch_are_refused() -> None:
    log_ratio, mask = corpus(0, 0.1)
    with pytest.raises(ValueError, match="rollout_is='geometric'"):
        importance_weights(log_ratio, mask, level="geometric")
    with pytest.raises(ValueError, match="at least one response token"):
        importance_weights(log_ratio, torch.zeros_like(mask))


# --- the whole correction (weights, rejection, off-policy metrics) against verl's ---------------

REJECTIONS = (
    None, ("token_k1", "0.5_2.0"), ("token_k1", 1.5), ("token_k2", 0.05), ("token_k3", "0.1"),
    ("seq_sum_k1", "0.6_1.4"), ("seq_sum_k2", 0.5), ("seq_sum_k3", 0.5), ("seq_mean_k1", "0.8_1.25"),
    ("seq_mean_k2", 0.02), ("seq_mean_k3", 0.02), ("seq_max_k2", 0.1), ("seq_max_k3", 0.1),
    ("token_k1,seq_max_k3", "0.4_1.8,3.0"), ("seq_mean_k3,token_k2,seq_mean_k3", 0.05),
)
WHOLE_CASES = list(itertools.product(range(4), (0.05, 0.5, 25.0), (None, "token", "sequence"), REJECTIONS))


def corrected_corpus(seed: int, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Actor and rollout log-probs of ragged responses, one of them empty when the seed is odd."""
    log_ratio, mask = corpus(seed, scale)
    if seed % 2:
        mask[1] = 0.0
    generator = torch.Generator().manual_seed(100 + seed)
    rollout = -torch.rand(mask.shape, generator=generator, dtype=torch.float64) * 3
    return rollout + log_ratio, rollout, mask


@pytest.mark.parametrize(("seed", "scale", "level", "rejection"), WHOLE_CASES)
def test_the_whole_correction_equals_verls(
    verl_rollout_corr: ModuleType, seed: int, scale: float, level: str | None, rejection: tuple[str, object] | None
) -> None:
    actor, rollout, mask = corrected_corpus(seed, scale)
    modes, thresholds = rejection or (None, None)
    settings = CorrectionSettings(
        rollout_is=level, rollout_is_threshold="0.5_3.0" if seed == 3 else 2.0, rollout_rs=modes,
        rollout_rs_threshold=thresholds,  # type: ignore[arg-type]
    )
    ours = correct(actor, rollout, mask, settings)
    try:
        weights, kept, metrics = verl_rollout_corr.compute_rollout_correction_and_rejection_mask(
            actor, rollout, mask, rollout_is=level, rollout_is_threshold=settings.rollout_is_threshold,
            rollout_rs=modes, rollout_rs_threshold=thresholds,
        )
    except ZeroDivisionError:  # verl 0.9.1's effective sample size when every weight is 0 (see above)
        assert ours.weights is not None and not ours.weights.any()
        return
    assert (ours.weights is None) == (weights is None)
    if weights is not None:
        torch.testing.assert_close(ours.weights, weights.batch["rollout_is_weights"], rtol=1e-6, atol=1e-6)
    assert torch.equal(ours.mask, kept)
    assert sorted(ours.metrics) == sorted(metrics)
    for key, value in metrics.items():
        if math.isinf(value):  # k3_kl is exp(log ratio) unclamped, in verl as in ours
            assert ours.metrics[key] == value, key
            continue
        assert math.isclose(ours.metrics[key], float(value), rel_tol=1e-6, abs_tol=1e-6), (key, ours.metrics[key], value)


# --- verl's own cases (tests/trainer/ppo/test_rollout_corr.py), on ours -------------------------


def mismatched(rows: int, width: int, noise: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    actor = torch.randn(rows, width, generator=generator)
    return actor, actor + torch.randn(rows, width, generator=generator) * noise


def test_token_weights_are_capped_and_sequence_weights_shared_by_a_response() -> None:
    actor, rollout = mismatched(4, 10, 0.1)
    mask = torch.ones(4, 10)
    token = correct(actor, rollout, mask, CorrectionSettings(rollout_is="token", rollout_is_threshold=2.0))
    assert token.weights is not None and token.weights.shape == actor.shape and token.weights.max() <= 2.0
    sequence = correct(actor, rollout, mask, CorrectionSettings(rollout_is="sequence", rollout_is_threshold=5.0))
    assert sequence.weights is not None
    for row in sequence.weights:
        assert torch.allclose(row, row[0])


def test_with_correction_off_the_mask_is_kept_and_the_off_policy_metrics_still_come() -> None:
    actor, rollout = mismatched(4, 10, 0.1)
    mask = torch.ones(4, 10)
    off = correct(actor, rollout, mask, CorrectionSettings())
    assert off.weights is None and torch.equal(off.mask, mask)
    assert {f"rollout_corr/{name}" for name in OFF_POLICY_NAMES} == set(off.metrics)


OFF_POLICY_NAMES = (
    "training_ppl", "training_log_ppl", "kl", "k3_kl", "rollout_ppl", "rollout_log_ppl", "log_ppl_diff",
    "log_ppl_abs_diff", "log_ppl_diff_max", "log_ppl_diff_min", "ppl_ratio", "chi2_token", "chi2_seq",
)


@pytest.mark.parametrize(("mode", "threshold"), [
    ("token_k1", "0.5_1.5"), ("token_k2", 2.0), ("token_k3", 2.0), ("seq_sum_k1", "0.6_1.4"), ("seq_sum_k2", 2.5),
    ("seq_sum_k3", 2.5), ("seq_mean_k1", "0.5_1.5"), ("seq_mean_k2", 2.0), ("seq_mean_k3", 2.0),
    ("seq_max_k2", 2.0), ("seq_max_k3", 2.0),
])
def test_every_rejection_mode_reports_its_estimate(mode: str, threshold: object) -> None:
    actor, rollout = mismatched(3, 7, 0.15)
    mask = torch.ones(3, 7)
    result = correct(actor, rollout, mask, CorrectionSettings(rollout_rs=mode, rollout_rs_threshold=threshold))  # type: ignore[arg-type]
    assert f"rollout_corr/rollout_rs_{mode}_mean" in result.metrics and result.mask.shape == mask.shape


def test_chained_modes_each_report_and_all_must_pass() -> None:
    actor, rollout = mismatched(2, 6, 0.2)
    mask = torch.ones(2, 6)
    both = correct(actor, rollout, mask, CorrectionSettings(rollout_rs="token_k1,seq_max_k3", rollout_rs_threshold="0.4_1.8,3.0"))
    assert {"rollout_corr/rollout_rs_token_k1_mean", "rollout_corr/rollout_rs_seq_max_k3_mean"} <= set(both.metrics)
    token_only = correct(actor, rollout, mask, CorrectionSettings(rollout_rs="token_k1", rollout_rs_threshold="0.4_1.8"))
    assert bool((both.mask <= token_only.mask).all())


def test_rejection_masks_a_response_and_leaves_its_weights_as_ratios() -> None:
    actor = torch.full((2, 5), -2.0)
    rollout = torch.tensor([[-1.0] * 5, [-2.5] * 5])  # ratios e^-1 (outside 0.5..2) and e^0.5 (inside)
    result = correct(actor, rollout, torch.ones(2, 5), CorrectionSettings(
        rollout_is="token", rollout_is_threshold=2.0, rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0",
    ))
    assert result.weights is not None
    torch.testing.assert_close(result.weights[:, 0], torch.tensor([math.exp(-1.0), math.exp(0.5)]))
    assert result.mask[0].eq(0).all() and result.mask[1].eq(1).all()
    assert result.metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(0.5)


def test_icepop_zeroes_weights_outside_its_band_and_keeps_the_mask() -> None:
    raw = torch.tensor([[0.4, 0.8, 6.0]])
    mask = torch.ones_like(raw)
    result = correct(torch.zeros_like(raw), -torch.log(raw), mask, CorrectionSettings(rollout_is="token", rollout_is_threshold="0.5_5.0"))
    assert result.weights is not None
    torch.testing.assert_close(result.weights, torch.tensor([[0.0, 0.8, 0.0]]))
    assert torch.equal(result.mask, mask)
    assert result.metrics["rollout_corr/rollout_is_oob_ratio"] == pytest.approx(2 / 3)
    assert result.metrics["rollout_corr/rollout_is_std"] == pytest.approx(0.3771236, abs=1e-6)
    assert result.metrics["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(1 / 3, abs=1e-6)


def test_the_response_share_over_the_bound_reads_the_raw_weights() -> None:
    """Truncated weights never average above the bound; the share of responses over it is read before truncation."""
    raw = torch.tensor([[1.0, 6.0], [0.9, 1.1]])
    result = correct(torch.log(raw), torch.zeros_like(raw), torch.ones_like(raw), CorrectionSettings(rollout_is="token"))
    assert result.metrics["rollout_corr/rollout_is_seq_fraction_high"] == pytest.approx(0.5)


@pytest.mark.parametrize(("fields", "message"), [
    ({"rollout_is": "geometric"}, "rollout_is='geometric'"),
    ({"rollout_is": "token", "rollout_is_threshold": None}, "rollout_is_threshold is null"),
    ({"rollout_is": "token", "rollout_is_threshold": True}, "rollout_is_threshold=True"),
    ({"rollout_rs": "token_k4", "rollout_rs_threshold": 1.0}, "unknown mode token_k4"),
    ({"rollout_rs": "seq_max_k1", "rollout_rs_threshold": 1.0}, "unknown mode seq_max_k1"),
    ({"rollout_rs": "token_k1"}, "needs rollout_rs_threshold"),
    ({"rollout_rs": "token_k2", "rollout_rs_threshold": "0.1_0.2"}, "one positive upper bound"),
    ({"rollout_rs": "token_k1", "rollout_rs_threshold": "2.0_0.5"}, "lower <= upper"),
    ({"rollout_rs": "token_k1,token_k2", "rollout_rs_threshold": "1,2,3"}, "one threshold for all 2 modes"),
    ({"loss_type": "dpo"}, "loss_type='dpo'"),
])
def test_bad_settings_are_refused_by_name(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        CorrectionSettings(**fields)  # type: ignore[arg-type]
