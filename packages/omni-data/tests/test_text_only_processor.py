"""A text-only model's processor (its tokenizer) takes text rows; a row with a medium it has
no sub-processor for is refused by name, not encoded with the medium silently dropped (a
transformers tokenizer accepts ``images=`` and ignores it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from omni_data import DatasetConfig, RLDataset, rl_row, write_rl_parquet
from omni_data.errors import RowError


def row(text: str, index: int, **media: Any) -> dict[str, Any]:
    return rl_row(data_source="openai/gsm8k", messages=[{"role": "user", "content": text}], ground_truth="1",
                  ability="math", extra_info={"index": index}, **media)


def text_only(processor: Any) -> Any:
    """The stand-in processor without its image, audio and video sub-processors."""
    del processor.image_processor, processor.feature_extractor, processor.video_processor
    return processor


def test_a_media_row_is_refused_for_a_processor_without_that_medium(
    tmp_path: Path, fake_processor: Any, media: Any
) -> None:
    files = write_rl_parquet([
        row("What is 1 + 0?", 0),
        row("<image>What is this?", 1, images=[{"bytes": media.image_bytes(), "path": "a.png"}]),
    ], tmp_path / "train.parquet")
    with pytest.raises(RowError, match=r"row 1 of .*train.parquet: the row has image input, which the model's "
                                       r"processor \(FakeProcessor\) cannot take \(it has no image_processor\)") as info:
        RLDataset(files, text_only(fake_processor))
    assert info.value.reason == "unsupported_media"
    assert fake_processor.calls == [{"text": ["user: What is 1 + 0?\nassistant:"]}]  # the text row only

    kept = RLDataset(files, fake_processor, DatasetConfig(on_bad_row="skip"))
    assert len(kept) == 1 and kept.report.dropped == {"unsupported_media": 1}
