from __future__ import annotations

import pytest
import torch

from omni_model_kit.thinker_processor import dedup_pad_tokens

IMG, VID, AUD = 90, 91, 92
PADS = (IMG, VID, AUD)


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([], []),
        ([5], [5]),
        ([1, 2, 3, 3, 4], [1, 2, 3, 3, 4]),  # no pads: repeated ordinary tokens stay
        ([1, IMG, IMG, IMG, 2], [1, IMG, 2]),
        ([IMG, IMG], [IMG]),  # a run at the start and the end
        ([1, IMG, IMG, AUD, AUD, AUD, VID, 2], [1, IMG, AUD, VID, 2]),  # adjacent different pads
        ([IMG, IMG, 7, IMG, IMG], [IMG, 7, IMG]),  # two images: two runs, two pads
        ([AUD, IMG, AUD, IMG], [AUD, IMG, AUD, IMG]),  # alternating pads are all kept
    ],
)
def test_dedup_pad_tokens_on_lists(ids: list[int], expected: list[int]) -> None:
    assert dedup_pad_tokens(ids, PADS) == expected


def test_dedup_pad_tokens_keeps_tensor_type_dtype_and_device() -> None:
    ids = torch.tensor([1, VID, VID, VID, 2], dtype=torch.int32)
    out = dedup_pad_tokens(ids, PADS)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.int32
    assert out.tolist() == [1, VID, 2]
    empty = torch.tensor([], dtype=torch.long)
    assert dedup_pad_tokens(empty, PADS).numel() == 0


def test_dedup_pad_tokens_refuses_batches() -> None:
    with pytest.raises(ValueError, match=r"one sequence \(1-D\), got shape \(2, 2\)"):
        dedup_pad_tokens(torch.ones(2, 2, dtype=torch.long), PADS)
