"""What both engines' offline preference runs share around the loss: each pair's reference
log-probs computed once (``ReferenceCache``) and verl-omni's ``val/*`` metrics."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from omni_training.preference import PREFERENCE_LOSSES, PreferenceSettings, ReferenceCache, validation_metrics

SETTINGS = PreferenceSettings(loss_type="sigmoid", beta=0.5, label_smoothing=0.0, average_log_prob=False,
                              simpo_gamma=0.5)


@dataclass(frozen=True)
class Keyed:
    key: int


def test_a_pairs_reference_is_scored_the_first_time_only_and_a_repeat_in_a_batch_once() -> None:
    scored: list[list[int]] = []

    def score(pairs: list[Keyed]) -> torch.Tensor:
        scored.append([p.key for p in pairs])
        return torch.tensor([value for p in pairs for value in (-float(p.key), -10.0 - p.key)])

    cache = ReferenceCache(reference_free=False)
    chosen, rejected = cache.lookup([Keyed(1), Keyed(2), Keyed(1)], score)
    assert chosen.tolist() == [-1.0, -2.0, -1.0] and rejected.tolist() == [-11.0, -12.0, -11.0]
    chosen, _ = cache.lookup([Keyed(2), Keyed(3)], score)
    assert chosen.tolist() == [-2.0, -3.0]
    assert scored == [[1, 2], [3]]
    assert ReferenceCache(reference_free=True).lookup([Keyed(1)], score) == (None, None)
    assert scored == [[1, 2], [3]]


def test_validation_reports_verl_omnis_names_overall_and_per_modality() -> None:
    image = (torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0]), torch.tensor([-2.0, -2.0]),
             torch.tensor([-2.0, -2.0]))
    audio = (torch.tensor([-1.0]), torch.tensor([-4.0]), torch.tensor([-1.5]), torch.tensor([-1.5]))
    metrics = validation_metrics(PREFERENCE_LOSSES.get("sigmoid"), SETTINGS, {"image": image, "audio": audio})
    names = ("num_samples", "dpo_loss", "reward_accuracy", "reward_margin", "chosen_rewards", "rejected_rewards")
    assert set(metrics) == {f"val/{scope}{name}" for scope in ("", "image/", "audio/") for name in names}
    assert metrics["val/num_samples"] == 3 and metrics["val/image/num_samples"] == 2
    # image: margins beta * ((c - rc) - (r - rr)) = 0.5 * 2, 0.5 * -1; audio: 0.5 * 3
    assert metrics["val/image/reward_accuracy"] == 0.5 and metrics["val/audio/reward_accuracy"] == 1.0
    assert metrics["val/reward_accuracy"] == pytest.approx(2 / 3)
    assert metrics["val/reward_margin"] == pytest.approx((1.0 - 0.5 + 1.5) / 3)
    assert metrics["val/audio/dpo_loss"] == pytest.approx(-torch.nn.functional.logsigmoid(torch.tensor(1.5)).item())
