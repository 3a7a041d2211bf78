"""The DPO-family losses: verl-omni's CPU cases (``tests/trainer/omni/test_omni_algos_on_cpu.py``)
with their values worked out, every variant against a float64 scalar implementation of its
formula on a broad random corpus, and the registry's refusals.

TRL parity (the same log-probs through TRL's own loss code) is ``benchmarks/dpo_loss_parity.py``:
TRL is installed only in the bench environment.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from omni_contracts import RegistrationError, UnknownNameError
from omni_training.preference import (
    PREFERENCE_LOSSES,
    PreferenceLoss,
    PreferenceSettings,
    get_preference_loss,
    preference_loss,
    preference_metrics,
    register_preference_loss,
    robust_loss,
    sequence_log_probs,
    simpo_loss,
)

LN2 = math.log(2.0)
REFERENCE_LOSSES = ("sigmoid", "ipo", "hinge", "robust")
TOL = {"rtol": 1e-6, "atol": 1e-6}


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def dpo(pc: float, pr: float, rc: float, rr: float, **settings: object) -> PreferenceLoss:
    return preference_loss(
        policy_chosen=t(pc), policy_rejected=t(pr), ref_chosen=t(rc), ref_rejected=t(rr),
        settings=PreferenceSettings(**settings),  # type: ignore[arg-type]
    )


# verl-omni's cases -----------------------------------------------------------------------


def test_sigmoid_zero_logits_is_log_two() -> None:
    # Δ = (-1 - -1.1) - (-2 - -2.1) = 0  ->  -logσ(0) = ln 2
    out = dpo(-1.0, -2.0, -1.1, -2.1, beta=0.1)
    assert out.loss.shape == ()
    assert out.loss.item() == pytest.approx(LN2, rel=1e-9)


def test_reward_accuracy_reflects_implicit_rewards() -> None:
    # chosen reward 0.5 * (0 - -1) = 0.5, rejected 0.5 * 0 = 0; Δ = 1: -logσ(0.5) = 0.474077
    out = dpo(0.0, -1.0, -1.0, -1.0, beta=0.5)
    metrics = preference_metrics(out, t(0.0), t(-1.0))
    assert metrics["rewards/accuracies"] == 1.0
    assert metrics["rewards/chosen"] == pytest.approx(0.5)
    assert metrics["rewards/rejected"] == pytest.approx(0.0)
    assert metrics["rewards/margins"] == pytest.approx(0.5)
    assert metrics["loss"] == pytest.approx(0.474077, abs=1e-6)


def test_policy_margin_over_reference_lowers_loss() -> None:
    worse = dpo(-1.0, -1.0, -1.0, -1.0, beta=0.5).loss.item()  # Δ = 0: ln 2
    better = dpo(0.0, -2.0, -1.0, -1.0, beta=0.5).loss.item()  # Δ = 2: -logσ(1) = 0.313262
    assert worse == pytest.approx(LN2)
    assert better == pytest.approx(0.313262, abs=1e-6)
    assert better < worse


def test_ipo_value() -> None:
    # Δ = (0.2 - 0.1) - (-0.3 - -0.2) = 0.2; 1/(2β) = 2.5: (0.2 - 2.5)² = 5.29
    out = dpo(0.2, -0.3, 0.1, -0.2, beta=0.2, loss_type="ipo")
    assert out.loss.item() == pytest.approx(5.29, rel=1e-9)


def test_label_smoothing_changes_loss() -> None:
    # βΔ = 0.1: -logσ(0.1) = 0.644397; with ε = 0.1, + 0.1 * (-logσ(-0.1) + logσ(0.1)) = + 0.1 * 0.1
    plain = dpo(0.5, -0.5, 0.0, 0.0, beta=0.1, label_smoothing=0.0).loss.item()
    smooth = dpo(0.5, -0.5, 0.0, 0.0, beta=0.1, label_smoothing=0.1).loss.item()
    assert plain == pytest.approx(0.644397, abs=1e-6)
    assert smooth == pytest.approx(0.654397, abs=1e-6)


def test_token_level_pairs() -> None:
    # verl-omni's callable case: rows alternate chosen, rejected; its labels [-100, 1] are
    # shifted by one, so only column 0 is scored: here the aligned mask says so directly.
    log_probs = t(0.0, 9.0, -1.0, 9.0, 0.2, 9.0, -0.8, 9.0).view(4, 2)
    ref = t(-0.1, 9.0, -0.9, 9.0, 0.0, 9.0, -0.7, 9.0).view(4, 2)
    mask = torch.tensor([[1, 0]] * 4)
    policy, reference = (sequence_log_probs(x, mask, average=False) for x in (log_probs, ref))
    out = preference_loss(
        policy_chosen=policy[0::2], policy_rejected=policy[1::2],
        ref_chosen=reference[0::2], ref_rejected=reference[1::2], settings=PreferenceSettings(),
    )
    # pair 1: Δ = (0 - -0.1) - (-1 - -0.9) = 0.2 -> -logσ(0.02) = 0.683197
    # pair 2: Δ = (0.2 - 0) - (-0.8 - -0.7) = 0.3 -> -logσ(0.03) = 0.678260
    torch.testing.assert_close(out.losses, t(0.683197, 0.678260), rtol=0, atol=1e-6)
    assert out.loss.item() == pytest.approx(0.680728, abs=1e-6)
    metrics = preference_metrics(out, policy[0::2], policy[1::2])
    assert metrics["rewards/margins"] == pytest.approx(0.025)  # mean of 0.1 * (0.2, 0.3)


@pytest.mark.parametrize(("average", "margin"), [(False, 0.4), (True, 0.2)])
def test_average_log_prob(average: bool, margin: float) -> None:
    # chosen tokens (2, 2), rejected (0, 0), reference 0: sums 4 vs 0, means 2 vs 0; β = 0.1
    log_probs = t(2.0, 2.0, 9.0, 0.0, 0.0, 9.0).view(2, 3)
    mask = torch.tensor([[1, 1, 0]] * 2)
    seq = sequence_log_probs(log_probs, mask, average=average)
    ref = sequence_log_probs(torch.zeros(2, 3, dtype=torch.float64), mask, average=average)
    out = preference_loss(
        policy_chosen=seq[:1], policy_rejected=seq[1:], ref_chosen=ref[:1], ref_rejected=ref[1:],
        settings=PreferenceSettings(average_log_prob=average),
    )
    assert preference_metrics(out, seq[:1], seq[1:])["rewards/margins"] == pytest.approx(margin)


# Every variant against its formula --------------------------------------------------------


def log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


def formula(loss_type: str, pc: float, pr: float, rc: float, rr: float, s: PreferenceSettings) -> tuple[float, float, float]:
    """(loss, chosen reward, rejected reward) of one pair, in Python floats."""
    b, e = s.beta, s.label_smoothing
    if loss_type == "simpo":
        m = pc - pr - s.simpo_gamma / b
        return -(1 - e) * log_sigmoid(b * m) - e * log_sigmoid(-b * m), b * pc, b * pr
    d = (pc - rc) - (pr - rr)
    loss = {
        "sigmoid": lambda: -(1 - e) * log_sigmoid(b * d) - e * log_sigmoid(-b * d),
        "ipo": lambda: (d - 1 / (2 * b)) ** 2,
        "hinge": lambda: max(0.0, 1 - b * d),
        "robust": lambda: (-(1 - e) * log_sigmoid(b * d) + e * log_sigmoid(-b * d)) / (1 - 2 * e),
    }[loss_type]()
    return loss, b * (pc - rc), b * (pr - rr)


def corpus() -> list[tuple[str, int, int, float, float, float]]:
    """(loss_type, seed, pairs, scale, beta, label_smoothing): scale 5e3 gives summed
    log-probs of long responses, βΔ up to ~1e4 (saturated sigmoids)."""
    cases: list[tuple[str, int, int, float, float, float]] = []
    for loss_type, pairs, scale, beta in itertools.product(
        ("sigmoid", "ipo", "hinge", "robust", "simpo"), (1, 7, 64), (1.0, 50.0, 5e3), (0.01, 0.1, 0.5, 2.0)
    ):
        for eps in (0.0, 0.1, 0.49) if loss_type in ("sigmoid", "robust", "simpo") else (0.0,):
            cases.append((loss_type, len(cases), pairs, scale, beta, eps))
    return cases


def random_pairs(seed: int, pairs: int, scale: float) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    values = [-torch.rand(pairs, generator=g, dtype=torch.float64) * scale for _ in range(4)]
    if pairs > 2:
        values[1][0] = values[0][0]  # equal log-probs and references: a tie, not an accurate pair
        values[3][0] = values[2][0]
        values[0][1] = 0.0  # a certain response
    return values


@pytest.mark.parametrize(("loss_type", "seed", "pairs", "scale", "beta", "eps"), corpus())
def test_matches_formula(loss_type: str, seed: int, pairs: int, scale: float, beta: float, eps: float) -> None:
    pc, pr, rc, rr = random_pairs(seed, pairs, scale)
    settings = PreferenceSettings(
        loss_type=loss_type, beta=beta, label_smoothing=eps, average_log_prob=loss_type == "simpo", simpo_gamma=0.5 + seed % 3
    )
    refs = (None, None) if loss_type == "simpo" else (rc, rr)
    policy = [pc.clone().requires_grad_(True), pr.clone().requires_grad_(True)]
    out = preference_loss(
        policy_chosen=policy[0], policy_rejected=policy[1], ref_chosen=refs[0], ref_rejected=refs[1], settings=settings
    )
    expected = [formula(loss_type, *map(float, row), settings) for row in zip(pc, pr, rc, rr, strict=True)]
    losses, chosen, rejected = (t(*column) for column in zip(*expected, strict=True))
    torch.testing.assert_close(out.losses, losses, **TOL)
    torch.testing.assert_close(out.chosen_rewards, chosen, **TOL)
    torch.testing.assert_close(out.rejected_rewards, rejected, **TOL)
    assert not out.chosen_rewards.requires_grad and not out.rejected_rewards.requires_grad

    metrics = preference_metrics(out, pc, pr, prefix="eval_")
    pairs_f = float(pairs)
    want = {
        "eval_loss": sum(losses.tolist()) / pairs_f,
        "eval_rewards/chosen": sum(chosen.tolist()) / pairs_f,
        "eval_rewards/rejected": sum(rejected.tolist()) / pairs_f,
        "eval_rewards/accuracies": sum(c > r for c, r in zip(chosen.tolist(), rejected.tolist(), strict=True)) / pairs_f,
        "eval_rewards/margins": sum(c - r for c, r in zip(chosen.tolist(), rejected.tolist(), strict=True)) / pairs_f,
        "eval_logps/chosen": sum(pc.tolist()) / pairs_f,
        "eval_logps/rejected": sum(pr.tolist()) / pairs_f,
    }
    assert metrics.keys() == want.keys()
    for key, value in want.items():
        assert metrics[key] == pytest.approx(value, rel=1e-6, abs=1e-6), key

    out.loss.backward()
    for grad in (policy[0].grad, policy[1].grad):
        assert grad is not None and torch.isfinite(grad).all()


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "robust", "simpo"])
def test_gradients_match_finite_differences(loss_type: str) -> None:
    pc, pr, rc, rr = random_pairs(3, 5, 4.0)
    settings = PreferenceSettings(loss_type=loss_type, beta=0.3, label_smoothing=0.2, average_log_prob=True)
    refs = (None, None) if loss_type == "simpo" else (rc, rr)

    def loss(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return preference_loss(policy_chosen=a, policy_rejected=b, ref_chosen=refs[0], ref_rejected=refs[1], settings=settings).loss

    assert torch.autograd.gradcheck(loss, (pc.requires_grad_(True), pr.requires_grad_(True)))


def test_float32_extremes_stay_finite() -> None:
    pc, pr = torch.tensor([-1e4, 0.0, -3e4]), torch.tensor([0.0, -1e4, -3e4])
    for loss_type in REFERENCE_LOSSES:
        a, b = pc.clone().requires_grad_(True), pr.clone().requires_grad_(True)
        out = preference_loss(
            policy_chosen=a, policy_rejected=b, ref_chosen=torch.zeros(3), ref_rejected=torch.zeros(3),
            settings=PreferenceSettings(loss_type=loss_type, beta=2.0, label_smoothing=0.1),
        )
        out.loss.backward()
        assert torch.isfinite(out.losses).all() and torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()  # type: ignore[arg-type]


# sequence_log_probs -----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_sequence_log_probs(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    token = -torch.rand(6, 11, generator=g, dtype=torch.float64) * 5
    mask = (torch.rand(6, 11, generator=g) < 0.6).long()
    mask[0] = 0  # an empty row: 0 for the sum, and the mean divides by 1
    token[mask == 0] = -math.inf  # values under a zero mask never leak in
    sums = [sum(float(x) for x, m in zip(row, keep, strict=True) if m) for row, keep in zip(token, mask, strict=True)]
    means = [s / max(1, int(keep.sum())) for s, keep in zip(sums, mask, strict=True)]
    torch.testing.assert_close(sequence_log_probs(token, mask, average=False), t(*sums), **TOL)
    torch.testing.assert_close(sequence_log_probs(token, mask.bool(), average=True), t(*means), **TOL)


def test_sequence_log_probs_refuses_misaligned_mask() -> None:
    with pytest.raises(ValueError, match="one shape"):
        sequence_log_probs(torch.zeros(2, 3), torch.ones(2, 4), average=False)


# Refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize("loss_type", REFERENCE_LOSSES)
def test_reference_losses_need_references(loss_type: str) -> None:
    fn = get_preference_loss(loss_type)
    for refs in ((None, None), (t(0.0), None)):
        with pytest.raises(ValueError, match="reference model's log-probs"):
            fn(policy_chosen=t(0.0), policy_rejected=t(0.0), ref_chosen=refs[0], ref_rejected=refs[1],
               settings=PreferenceSettings(loss_type=loss_type))


def test_simpo_is_reference_free_and_length_averaged() -> None:
    with pytest.raises(ValueError, match="reference-free"):
        simpo_loss(policy_chosen=t(0.0), policy_rejected=t(0.0), ref_chosen=t(0.0), ref_rejected=t(0.0),
                   settings=PreferenceSettings(loss_type="simpo", average_log_prob=True))
    with pytest.raises(ValueError, match="average_log_prob=true"):
        PreferenceSettings(loss_type="simpo")
    with pytest.raises(ValueError, match="average_log_prob=true"):  # settings made for another loss
        simpo_loss(policy_chosen=t(0.0), policy_rejected=t(0.0), ref_chosen=None, ref_rejected=None,
                   settings=PreferenceSettings())


@pytest.mark.parametrize("eps", [0.5, 0.7])
def test_robust_refuses_half_or_more_flipped(eps: float) -> None:
    with pytest.raises(ValueError, match="label_smoothing < 0.5"):
        PreferenceSettings(loss_type="robust", label_smoothing=eps)
    with pytest.raises(ValueError, match="label_smoothing < 0.5"):
        robust_loss(policy_chosen=t(0.0), policy_rejected=t(0.0), ref_chosen=t(0.0), ref_rejected=t(0.0),
                    settings=PreferenceSettings(label_smoothing=eps))


def test_settings_report_every_error_at_once() -> None:
    with pytest.raises(ValueError) as info:
        PreferenceSettings(loss_type="dpo", beta=0.0, label_smoothing=1.0)
    message = str(info.value)
    assert "beta must be > 0" in message and "label_smoothing must be in [0, 1)" in message
    assert "Unknown preference loss_type 'dpo'" in message and "sigmoid" in message


@pytest.mark.parametrize(
    "shapes", [((2,), (3,), (2,), (2,)), ((2, 1), (2, 1), (2, 1), (2, 1)), ((0,), (0,), (0,), (0,))]
)
def test_pairs_must_be_one_value_per_pair(shapes: tuple[tuple[int, ...], ...]) -> None:
    pc, pr, rc, rr = (torch.zeros(shape) for shape in shapes)
    with pytest.raises(ValueError, match="shape \\[P\\]|no pairs"):
        preference_loss(policy_chosen=pc, policy_rejected=pr, ref_chosen=rc, ref_rejected=rr, settings=PreferenceSettings())


def test_registry() -> None:
    assert set(PREFERENCE_LOSSES.keys()) == {"sigmoid", "ipo", "hinge", "robust", "simpo"}

    def impostor(**_: object) -> PreferenceLoss:
        raise AssertionError("never called")

    with pytest.raises(RegistrationError, match="Duplicate preference loss_type 'sigmoid'"):
        register_preference_loss("sigmoid")(impostor)  # type: ignore[arg-type]
    assert get_preference_loss("sigmoid") is not impostor
    with pytest.raises(UnknownNameError, match="registered: hinge, ipo, robust, sigmoid, simpo"):
        get_preference_loss("orpo")


def test_positional_call_equals_keyword_call() -> None:
    pc, pr, rc, rr = random_pairs(5, 4, 3.0)
    settings = PreferenceSettings(loss_type="robust", label_smoothing=0.2)
    by_position = get_preference_loss("robust")(pc, pr, rc, rr, settings)
    by_keyword = preference_loss(policy_chosen=pc, policy_rejected=pr, ref_chosen=rc, ref_rejected=rr, settings=settings)
    torch.testing.assert_close(by_position.losses, by_keyword.losses, rtol=0, atol=0)
