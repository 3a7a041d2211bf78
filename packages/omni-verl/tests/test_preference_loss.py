"""The offline preference loss as verl's actor workers compute it (``omni_verl.preference``):
the rows the driver builds, verl's own no-padding conversion, and the loss against
omni-training's on the same sequence log-probs."""

from __future__ import annotations

import pickle
from functools import partial
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("verl")

from omni_training.preference import PREFERENCE_LOSSES, PreferenceSettings  # noqa: E402

from omni_verl.preference import (  # noqa: E402
    METRIC_PREFIX,
    REFERENCE_KEY,
    answer_batch,
    preference_loss,
    to_actor_format,
)

PAD = 0


def prompt(ids: list[int], width: int) -> dict[str, torch.Tensor]:
    """A processed prompt, left-padded to ``width`` as the dataset hands it over."""
    padding = [PAD] * (width - len(ids))
    return {
        "input_ids": torch.tensor([padding + ids]),
        "attention_mask": torch.tensor([[0] * len(padding) + [1] * len(ids)]),
    }


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
def test_the_workers_loss_is_omni_trainings_on_each_answers_own_tokens(loss_type: str) -> None:
    first, second = prompt([5, 6, 7], 4), prompt([8, 9], 4)
    rows = [(first, [11, 12]), (first, [13]), (second, [14, 15, 16]), (second, [17, 18])]
    settings = PreferenceSettings(loss_type=loss_type, beta=0.1, label_smoothing=0.0, average_log_prob=False,
                                  simpo_gamma=0.5)
    batch = answer_batch(rows, SimpleNamespace(), PAD)
    assert batch["responses"].shape == (4, 3)
    assert batch["prompts"][1].tolist() == [5, 6, 7]  # the prompts' own padding dropped,
    assert batch["prompts"][2].tolist() == [PAD, 8, 9]  # then left-padded to the longest
    assert batch["responses"][1].tolist() == [13, PAD, PAD]  # answers right-padded
    assert batch["response_mask"][1].tolist() == [1, 0, 0]
    reference = torch.tensor([-3.0, -4.0, -2.5, -2.0])
    batch[REFERENCE_KEY] = reference
    data = to_actor_format(batch, global_batch_size=4, dp_size=1)

    # Token log-probs as the actor's no-padding output: one value per kept token, where the value at
    # position t scores token t + 1 (verl's shift); each row's answer tokens are drawn apart.
    generator = torch.Generator().manual_seed(0)
    lengths = [int(batch["attention_mask"][i].sum()) for i in range(4)]
    flat = -torch.rand(sum(lengths), generator=generator, dtype=torch.float64)
    expected_sums, offset = [], 0
    for (inputs, answer), length in zip(rows, lengths, strict=True):
        start = offset + int(inputs["attention_mask"].sum()) - 1
        expected_sums.append(float(flat[start:start + len(answer)].sum()))
        offset += length

    loss, metrics = preference_loss(settings, {"log_probs": flat}, data)

    sums = torch.tensor(expected_sums, dtype=torch.float64)
    out = PREFERENCE_LOSSES.get(loss_type)(sums[0::2], sums[1::2], reference[0::2].double(),
                                           reference[1::2].double(), settings)
    assert float(loss) == pytest.approx(float(out.losses.mean()), rel=1e-9)
    assert set(metrics) and all(name.startswith(METRIC_PREFIX) for name in metrics)


def test_the_loss_ray_sends_to_the_workers_names_verls_extension_not_the_app() -> None:
    """verl's workers unpickle the driver's loss by module name: it must be importable there."""
    settings = PreferenceSettings(loss_type="sigmoid", beta=0.1, label_smoothing=0.0, average_log_prob=False,
                                  simpo_gamma=0.5)
    sent = pickle.dumps(partial(preference_loss, settings))
    assert b"omni_verl.preference" in sent
    assert b"omni_trainer" not in sent
