from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from omni_model_kit.thinker_processor import dedup_pad_tokens
from omni_qwen25.training_adapter import Qwen25OmniThinkerAdapter

IMG, VID, AUD = 90, 91, 92


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([], []),
        ([1, 2, 3, 3, 4], [1, 2, 3, 3, 4]),  # no pads: repeated ordinary tokens stay
        ([1, IMG, IMG, IMG, 2], [1, IMG, 2]),
        ([1, IMG, IMG, AUD, AUD, VID, 2], [1, IMG, AUD, VID, 2]),  # adjacent different pads
        ([IMG, IMG, 7, IMG, IMG], [IMG, 7, IMG]),  # two images: two runs, two pads
    ],
)
def test_dedup_pad_tokens(ids: list[int], expected: list[int]) -> None:
    assert dedup_pad_tokens(ids, (IMG, VID, AUD)) == expected
    assert dedup_pad_tokens(torch.tensor(ids, dtype=torch.int32), (IMG, VID, AUD)).tolist() == expected


VS, AS, AE, VE = 80, 81, 82, 83


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([1, VS, AS, VID, VID, AUD, VID, AUD, AE, VE, 2], [1, VS, VID, VE, 2]),  # a video with its soundtrack
        ([VS, AS, VID, AE, VE, AS, AUD, AE, VS, VID, VE], [VS, VID, VE, AS, AUD, AE, VS, VID, VE]),  # then others
        ([1, VS, AS, VID, VID], [1, VS, AS, VID, VID]),  # an unclosed block stays as it is
        ([1, AS, AUD, AE, 2], [1, AS, AUD, AE, 2]),
    ],
)
def test_fold_soundtracks(ids: list[int], expected: list[int]) -> None:
    from omni_model_kit.thinker_processor import fold_soundtracks

    assert fold_soundtracks(ids, VS, AS, AE, VE, VID) == expected
    assert fold_soundtracks(torch.tensor(ids), VS, AS, AE, VE, VID).tolist() == expected


def process(processor: Any, parts: list[dict[str, str]], **media: Any) -> Any:
    messages = [{"role": "user", "content": [*parts, {"type": "text", "text": "How many apples?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return processor(text=[text], return_tensors="pt", **media)


CASES = ("text", "image", "audio", "image+audio", "video")


def case_inputs(case: str, media: Any) -> tuple[list[dict[str, str]], dict[str, Any]]:
    return {
        "text": ([], {}),
        "image": ([{"type": "image"}], {"images": [media.picture()]}),
        "audio": ([{"type": "audio"}], {"audio": [media.tone(1.0)]}),
        "image+audio": ([{"type": "image"}, {"type": "audio"}], {"images": [media.picture()], "audio": [media.tone(2.0)]}),
        "video": ([{"type": "video"}], {"videos": [media.frames()]}),
    }[case]


@pytest.mark.parametrize("case", CASES)
def test_rope_positions_are_int64_and_match_the_thinkers_own(
    case: str, tiny_path: Path, tiny_config: Any, full_model: Any, media: Any
) -> None:
    # Qwen2.5-Omni's get_rope_index takes (input_ids, image_grid_thw, video_grid_thw,
    # attention_mask, use_audio_in_video, audio_seqlens, second_per_grids): the forward
    # passes audio lengths from feature_attention_mask and video_second_per_grid.
    processor = Qwen25OmniThinkerAdapter().configure_processor(str(tiny_path), tiny_config)
    parts, items = case_inputs(case, media)
    inputs = process(processor, parts, **items)
    kwargs = processor.get_rope_index_kwargs(dict(inputs))
    assert kwargs["use_audio_in_video"] is False
    grids = (inputs.get("image_grid_thw"), inputs.get("video_grid_thw"), inputs["attention_mask"])
    positions, deltas = processor.get_rope_index(inputs["input_ids"], *grids, **kwargs)
    assert positions.dtype == torch.int64 and deltas.dtype == torch.int64
    assert positions.shape == (3, 1, inputs["input_ids"].shape[1])
    upstream, upstream_deltas = full_model.thinker.get_rope_index(
        inputs["input_ids"], *grids, kwargs["use_audio_in_video"], kwargs["audio_seqlens"],
        kwargs["second_per_grids"],
    )
    assert torch.equal(positions, upstream.long()) and torch.equal(deltas, upstream_deltas.long())
    if case in ("image", "video"):
        pad = tiny_config.thinker_config.image_token_id if case == "image" else tiny_config.thinker_config.video_token_id
        rows = inputs["input_ids"][0] == pad
        assert rows.sum() > 1 and len(set(positions[1, 0, rows].tolist())) > 1  # 2-D inside


def test_audio_positions_follow_audio_length(tiny_path: Path, tiny_config: Any, media: Any) -> None:
    processor = Qwen25OmniThinkerAdapter().configure_processor(str(tiny_path), tiny_config)
    audio_id = tiny_config.thinker_config.audio_token_id

    def audio_positions(seconds: float) -> tuple[int, int]:
        inputs = process(processor, [{"type": "image"}, {"type": "audio"}], images=[media.picture()], audio=[media.tone(seconds)])
        positions, _ = processor.get_rope_index(
            inputs["input_ids"], inputs["image_grid_thw"], None, inputs["attention_mask"],
            **processor.get_rope_index_kwargs(dict(inputs)),
        )
        audio = positions[0, 0, inputs["input_ids"][0] == audio_id]
        return audio.numel(), int(positions[0, 0, -1])

    short_count, short_last = audio_positions(1.0)
    long_count, long_last = audio_positions(3.0)
    assert long_count > short_count
    assert long_last - short_last == long_count - short_count  # text after audio shifts by it


def test_dedup_on_a_processed_prompt(tiny_path: Path, tiny_config: Any, media: Any) -> None:
    processor = Qwen25OmniThinkerAdapter().configure_processor(str(tiny_path), tiny_config)
    ids = process(processor, [{"type": "image"}, {"type": "audio"}], images=[media.picture()], audio=[media.tone(1.0)])["input_ids"][0]
    thinker = tiny_config.thinker_config
    assert processor.pad_token_ids == (thinker.image_token_id, thinker.video_token_id, thinker.audio_token_id)
    deduped = processor.dedup_pad_tokens(ids)
    assert (deduped == thinker.image_token_id).sum() == 1 and (deduped == thinker.audio_token_id).sum() == 1
    pads = torch.isin(ids, torch.tensor(processor.pad_token_ids))
    assert torch.equal(deduped[~torch.isin(deduped, torch.tensor(processor.pad_token_ids))], ids[~pads])


def test_an_unbound_processor_says_how_to_load_it(tiny_path: Path) -> None:
    from omni_qwen25.processor import Qwen25OmniThinkerProcessor

    processor = Qwen25OmniThinkerProcessor.from_pretrained(tiny_path)
    with pytest.raises(RuntimeError, match="training adapter's configure_processor"):
        processor.get_rope_index(torch.ones(1, 3, dtype=torch.long))
