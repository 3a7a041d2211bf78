"""``omni_training.rollout_correction`` against verl 0.9.1's ``compute_rollout_correction_weights``
on a generated corpus: ragged masks (one-token and full rows), log-ratios from near-on-policy to
past verl's exp bound, both levels, TIS and IcePop thresholds, with and without batch
normalisation. Weights and every metric must agree."""

from __future__ import annotations

import itertools
import math
from types import ModuleType

import pytest
import torch

from omni_training.rollout_correction import Threshold, importance_weights


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


@pytest.mark.parametrize("spec", [True, "", "a_b", "5.0_0.5", 0, -1.0, "0_2"])
def test_a_bad_threshold_is_refused_by_value(spec: object) -> None:
    with pytest.raises(ValueError, match="rollout_is_threshold="):
        Threshold.parse(spec)  # type: ignore[arg-type]


def test_an_unknown_level_and_an_empty_batch_are_refused() -> None:
    log_ratio, mask = corpus(0, 0.1)
    with pytest.raises(ValueError, match="rollout_is='geometric'"):
        importance_weights(log_ratio, mask, level="geometric")
    with pytest.raises(ValueError, match="at least one response token"):
        importance_weights(log_ratio, torch.zeros_like(mask))
