"""Preference rows, PreferenceDataset, and verl-omni's modality batching and balancing.

The batching and balancing cases are verl-omni a1139baf's
``tests/utils/test_offline_mllm_dpo_dataset_on_cpu.py`` (L383-489), ported.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from omni_data import (
    DatasetConfig,
    InputFormatError,
    MediaError,
    PreferenceDataset,
    RowError,
    balanced_indices,
    modality_batches,
    preference_row,
    write_preference_parquet,
    write_rl_parquet,
)


def pair(
    question: str = "What is shown?",
    chosen: str = "a cat",
    rejected: str = "a dog",
    *,
    modality: str = "text",
    index: int = 0,
    **media: Any,
) -> dict[str, Any]:
    placeholder = f"<{modality}>" if modality != "text" else ""
    return preference_row(
        data_source=f"unit/{modality}",
        messages=[{"role": "user", "content": placeholder + question}],
        chosen=chosen,
        rejected=rejected,
        win_score=8.0,
        lose_score=3.0,
        modality=modality,
        extra_info={"split": "train", "index": index},
        **media,
    )


@pytest.fixture
def media_dir(tmp_path: Path, media: Any) -> Path:
    root = tmp_path / "media"
    root.mkdir()
    media.picture(64, 64, seed=3).save(root / "pic.png")
    media.wav(root / "tone.wav", seconds=1.0)
    media.mp4(root / "clip.mp4", frames=8, fps=4)
    return root


# --- preference_row -----------------------------------------------------------------------


def test_row_has_verl_omnis_columns_in_its_order() -> None:
    row = pair(modality="image", images=["/data/pic.png"])
    assert list(row) == [
        "data_source", "chosen", "rejected", "win_score", "lose_score", "ability", "reward_model",
        "extra_info", "prompt", "images",
    ]
    assert row["chosen"] == {"role": "assistant", "content": "a cat"}
    assert row["rejected"] == {"role": "assistant", "content": "a dog"}
    assert (row["win_score"], row["lose_score"]) == (8.0, 3.0)
    assert row["ability"] == "image_qa"
    assert row["reward_model"] == {"style": "preference"}
    assert row["extra_info"] == {"split": "train", "index": 0, "modality": "image"}
    assert row["prompt"] == [{"role": "user", "content": "<image>What is shown?"}]
    assert row["images"] == ["/data/pic.png"]


def test_text_row_has_no_media_column_and_scores_default() -> None:
    row = preference_row(
        data_source="unit", messages=[{"role": "user", "content": "hi"}], chosen="hello", rejected="go away",
        modality="text", extra_info={}, ability="chat",
    )
    assert not {"images", "audios", "videos"} & set(row)
    assert (row["win_score"], row["lose_score"], row["ability"]) == (1.0, 0.0, "chat")


@pytest.mark.parametrize(
    ("modality", "media", "message"),
    [
        ("speech", {}, r"modality must be one of \['text', 'image', 'audio', 'video'\], got 'speech'"),
        ("text", {"images": ["a.png"]}, r"A 'text' preference row takes no media column, got \['images'\]"),
        ("image", {}, r"A 'image' preference row takes a non-empty 'images' column only, got none"),
        ("image", {"images": []}, r"takes a non-empty 'images' column only, got \['images'\]"),
        ("audio", {"audios": ["a.wav"], "images": ["a.png"]}, r"got \['audios', 'images'\]"),
    ],
)
def test_row_refuses_media_that_do_not_match_the_modality(modality: str, media: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        preference_row(data_source="u", messages=[], chosen="a", rejected="b", modality=modality, extra_info={},
                       **media)


def test_an_empty_file_keeps_the_preference_columns(tmp_path: Path, fake_processor: Any) -> None:
    path = write_preference_parquet([], tmp_path / "empty.parquet")
    assert {"prompt", "chosen", "rejected"} <= set(pq.read_schema(path).names)
    assert len(PreferenceDataset(path, fake_processor)) == 0


# --- PreferenceDataset --------------------------------------------------------------------


def test_every_modality_is_encoded_with_its_pair(tmp_path: Path, media_dir: Path, fake_processor: Any) -> None:
    files = [
        write_preference_parquet([pair("Say hi", "hello", "bye", index=0)], tmp_path / "text.parquet"),
        write_preference_parquet([pair(modality="image", index=1, images=[str(media_dir / "pic.png")])],
                                 tmp_path / "image.parquet"),
        write_preference_parquet([pair(modality="audio", index=2, audios=[str(media_dir / "tone.wav")])],
                                 tmp_path / "audio.parquet"),
        write_preference_parquet([pair(modality="video", index=3, videos=[str(media_dir / "clip.mp4")])],
                                 tmp_path / "video.parquet"),
    ]
    dataset = PreferenceDataset(files, fake_processor)
    assert (len(dataset), dict(dataset.report.dropped)) == (4, {})
    assert dataset.modalities == ["text", "image", "audio", "video"]
    items = [dataset[i] for i in range(4)]
    assert items[0]["input_ids"].tolist() == list(range(4))  # "user: Say hi\nassistant:": four words
    assert items[0]["multi_modal_inputs"] == {}
    assert set(items[1]["multi_modal_inputs"]) == {"pixel_values"}
    assert set(items[2]["multi_modal_inputs"]) == {"input_features"}
    assert set(items[3]["multi_modal_inputs"]) == {"pixel_values_videos"}
    assert (items[0]["chosen"], items[0]["rejected"]) == ("hello", "bye")
    for i, item in enumerate(items):
        assert item["modality"] == dataset.modalities[i]
        assert (item["win_score"], item["lose_score"]) == (8.0, 3.0)
        assert item["reward_model"] == {"style": "preference"}
        assert item["index"] == i and item["source"] == f"{files[i]}:0"
    assert items[1]["raw_prompt"] == [
        {"role": "user", "content": [{"type": "image", "image": str(media_dir / "pic.png")},
                                     {"type": "text", "text": "What is shown?"}]}
    ]


def bare_row(chosen: Any, rejected: Any, **extra: Any) -> dict[str, Any]:
    """A row as other tools write it: plain-string answers, no scores."""
    return {"data_source": "unit", "prompt": [{"role": "user", "content": "q"}], "chosen": chosen,
            "rejected": rejected, "ability": "a", "reward_model": {"style": "preference"},
            "extra_info": {"index": 0}, **extra}


def test_plain_string_answers_and_missing_scores(tmp_path: Path, fake_processor: Any) -> None:
    path = write_rl_parquet([bare_row("yes", "no")], tmp_path / "bare.parquet")
    item = PreferenceDataset(path, fake_processor)[0]
    # verl-omni's reader: a missing win score is 1.0, a missing lose score 0.0.
    assert (item["chosen"], item["rejected"], item["win_score"], item["lose_score"]) == ("yes", "no", 1.0, 0.0)
    nulls = write_rl_parquet([bare_row("yes", "no", win_score=None, lose_score=None),
                              bare_row("yes", "no", win_score=7, lose_score=2)], tmp_path / "nulls.parquet")
    dataset = PreferenceDataset(nulls, fake_processor)
    assert [(dataset[i]["win_score"], dataset[i]["lose_score"]) for i in range(2)] == [(1.0, 0.0), (7.0, 2.0)]


def modality_row(data_source: str, extra_info: dict[str, Any], **media: Any) -> dict[str, Any]:
    row = bare_row("yes", "no", data_source=data_source, extra_info=extra_info)
    kinds = [k for k, column in (("image", "images"), ("audio", "audios"), ("video", "videos")) if column in media]
    row["prompt"] = [{"role": "user", "content": "".join(f"<{k}>" for k in kinds) + "q"}]
    return {**row, **media}


def test_modality_is_decided_as_verl_omni_does(tmp_path: Path, media_dir: Path, fake_processor: Any) -> None:
    pic, wav = str(media_dir / "pic.png"), str(media_dir / "tone.wav")
    rows = [
        modality_row("x", {"modality": "Audio"}, audios=[wav]),  # extra_info.modality, by substring
        modality_row("x", {"modality": "audio"}, images=[pic], audios=[wav]),  # extra_info wins over media
        modality_row("omni_preference/video", {}, images=[pic], audios=[wav]),  # media: image before audio
        modality_row("x", {}, audios=[wav]),
        modality_row("omni_preference/text", {}),  # nothing: text
        modality_row("x", {"modality": "text"}),
    ]
    dataset = PreferenceDataset(write_rl_parquet(rows, tmp_path / "m.parquet"), fake_processor)
    assert dataset.modalities == ["audio", "audio", "image", "audio", "text", "text"]
    assert dataset[1]["modality"] == "audio"


def test_modality_from_data_source_needs_that_medium(tmp_path: Path, fake_processor: Any) -> None:
    path = write_rl_parquet([modality_row("omni_preference/image", {"index": 0})], tmp_path / "m.parquet")
    with pytest.raises(RowError, match=r"row 0 of .*m.parquet: the row's modality is 'image' .* but it has no image"):
        PreferenceDataset(path, fake_processor)


def bad_rows(media_dir: Path) -> list[tuple[str, dict[str, Any], str]]:
    """(reason, row, message) for each kind of bad row; each row's only fault is its reason."""
    pic = str(media_dir / "pic.png")
    image = pair(modality="image", images=[pic])
    return [
        ("empty_answer", pair(chosen="  \n"), r"the chosen answer is empty"),
        ("empty_answer", pair(rejected=""), r"the rejected answer is empty"),
        ("identical_pair", pair(chosen=" same ", rejected="same"),
         r"chosen and rejected are the same answer \('same'\)"),
        ("bad_answer", {**pair(), "chosen": {"role": "assistant", "content": None}},
         r"column 'chosen' must be a string or \{'role': 'assistant', 'content': str\}"),
        ("bad_score", {**pair(), "win_score": float("nan")}, r"column 'win_score' must be a finite number, got nan"),
        ("missing_media", {**pair(), "extra_info": {"modality": "video"}},
         r"the row's modality is 'video' .* but it has no video"),
        ("missing_file", {**image, "images": [str(media_dir / "gone.png")]}, r"image file .*gone.png does not exist"),
        ("media_count_mismatch", {**image, "prompt": [{"role": "user", "content": "no placeholder"}]},
         r"\{'images': 1\} media entries have no placeholder in the prompt"),
        ("bad_reward_model", {**pair(), "reward_model": None}, r"column 'reward_model' must be a dict"),
    ]


@pytest.mark.parametrize("case", range(9))
def test_each_bad_row_fails_the_load_naming_file_and_row(
    tmp_path: Path, media_dir: Path, fake_processor: Any, case: int
) -> None:
    reason, row, message = bad_rows(media_dir)[case]
    path = write_rl_parquet([pair(), row], tmp_path / "bad.parquet")
    with pytest.raises(RowError, match=rf"row 1 of {path}: {message}") as info:
        PreferenceDataset(path, fake_processor)
    assert info.value.reason == reason
    assert isinstance(info.value, MediaError) == (reason == "missing_file")


def test_skip_mode_counts_every_reason(tmp_path: Path, media_dir: Path, fake_processor: Any) -> None:
    cases = bad_rows(media_dir)
    rows = [pair(index=0), *(row for _, row, _ in cases), pair(modality="image", images=[str(media_dir / "pic.png")])]
    path = write_rl_parquet(rows, tmp_path / "bad.parquet")
    dataset = PreferenceDataset(path, fake_processor, DatasetConfig(on_bad_row="skip"))
    assert dataset.report.dropped == Counter(reason for reason, _, _ in cases)
    assert (dataset.report.total, dataset.report.kept, len(dataset)) == (11, 2, 2)
    assert dataset.modalities == ["text", "image"]
    assert dataset[1]["source"] == f"{path}:10"


def test_missing_preference_columns_fail_naming_the_file(tmp_path: Path, fake_processor: Any) -> None:
    row = {k: v for k, v in pair().items() if k != "rejected"}
    path = write_rl_parquet([row], tmp_path / "rl.parquet")
    with pytest.raises(InputFormatError, match=rf"{path} lacks preference column\(s\) \['rejected'\]") as raised:
        PreferenceDataset(path, fake_processor)
    # The command the README gives (it named `python -m omni_data.convert`, which users never run).
    assert "`uv run trainer convert omni_preference --input DIR --output-dir DIR`" in str(raised.value)


def test_modalities_need_no_encoding(tmp_path: Path, media_dir: Path, fake_processor: Any) -> None:
    rows = [pair(), pair(modality="image", images=[str(media_dir / "pic.png")])]
    config = DatasetConfig(check_media_at_load=False, filter_overlong_prompts=False)
    dataset = PreferenceDataset(write_rl_parquet(rows, tmp_path / "p.parquet"), fake_processor, config)
    assert dataset.modalities == ["text", "image"] and fake_processor.calls == []


# --- modality_batches (verl-omni's ModalityGroupedBatchSampler) ----------------------------


def test_sequential_batches_visit_each_row_once_by_sorted_modality() -> None:
    modalities = ["image", "image", "video", "audio", "video", "audio"]
    batches = modality_batches(modalities, 2, seed=0, replacement=False, drop_last=False)
    assert batches == [[3, 5], [0, 1], [2, 4]]  # audio, image, video


def test_sequential_drop_last_drops_each_modalitys_partial_chunk() -> None:
    modalities = ["image", "image", "image", "video", "audio"]
    assert modality_batches(modalities, 2, seed=0, replacement=False, drop_last=True) == [[0, 1]]
    assert modality_batches(modalities, 2, seed=0, replacement=False, drop_last=False) == [[4], [0, 1], [2], [3]]


def test_weights_pick_the_modality() -> None:
    batches = modality_batches(["image", "video", "audio"], 1, seed=0, num_batches=6,
                               weights={"video": 100.0, "image": 0.0, "audio": 0.0})
    assert batches == [[1]] * 6


def test_weighted_batches_hold_one_modality_each_and_follow_the_seed() -> None:
    modalities = ["image", "image", "video", "audio", "video", "audio"]
    batches = modality_batches(modalities, 2, seed=0, num_batches=3)
    assert len(batches) == 3 and all(len(b) == 2 and len({modalities[i] for i in b}) == 1 for b in batches)
    assert batches == modality_batches(modalities, 2, seed=0, num_batches=3)
    # A new epoch (seed + epoch) draws anew; over many batches every modality comes up.
    many = [modality_batches(modalities, 2, seed=0, epoch=e, num_batches=20) for e in range(3)]
    assert many[0] != many[1] and many[1] != many[2]
    assert modality_batches(modalities, 2, seed=1, num_batches=20) == many[1]
    assert {modalities[b[0]] for b in many[0]} == {"image", "video", "audio"}


def test_weighted_batch_count_defaults_to_the_dataset_length() -> None:
    modalities = ["text"] * 7
    assert len(modality_batches(modalities, 3, seed=0)) == 2  # 7 // 3
    assert len(modality_batches(modalities, 3, seed=0, drop_last=False)) == 3  # ceil(7 / 3)
    assert modality_batches([], 3, seed=0) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, r"batch_size must be positive, got 0"),
        ({"weights": {"images": 1.0}}, r"weights name unknown modalities \['images'\]"),
        ({"weights": {"image": -1.0}}, r"weights must be non-negative, got \{'image': -1.0\}"),
        ({"weights": {"image": 0.0}}, r"weights give every present modality \(\['image'\]\) zero weight"),
    ],
)
def test_bad_batching_arguments_are_refused(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"batch_size": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        modality_batches(["image", "image"], arguments.pop("batch_size"), seed=0, **arguments)


def test_batches_of_no_rows_are_refused() -> None:
    with pytest.raises(ValueError, match=r"4 batches asked of an empty dataset"):
        modality_batches([], 2, seed=0, num_batches=4)


# --- balanced_indices (data.balance_max_samples_by_modality) --------------------------------


def test_balanced_indices_take_an_even_share_of_each_modality() -> None:
    modalities = ["image"] * 5 + ["video"] * 4 + ["audio"] * 3
    picked = balanced_indices(modalities, 6, seed=0)
    assert Counter(modalities[i] for i in picked) == {"image": 2, "video": 2, "audio": 2}
    assert [modalities[i] for i in picked] == ["audio"] * 2 + ["image"] * 2 + ["video"] * 2  # sorted order
    assert len(set(picked)) == 6
    assert picked == balanced_indices(modalities, 6, seed=0)
    assert balanced_indices(modalities, 6, seed=0, shuffle=False) == [9, 10, 0, 1, 5, 6]


def test_balanced_indices_give_the_remainder_and_shortfall_to_sorted_modalities() -> None:
    # 7 of 3 modalities: quotas 3/2/2 (the remainder to audio); audio has 1 row, so its 2
    # missing go round-robin to image and video: 1/3/3.
    modalities = ["audio"] + ["image"] * 5 + ["video"] * 5
    picked = balanced_indices(modalities, 7, seed=None, shuffle=False)
    assert picked == [0, 1, 2, 3, 6, 7, 8]
    # 5 of 3: the remainder 2 goes to the first two sorted modalities.
    assert Counter(["audio", "image", "video"][i // 3] for i in balanced_indices(
        ["audio"] * 3 + ["image"] * 3 + ["video"] * 3, 5, seed=1)) == {"audio": 2, "image": 2, "video": 1}


@pytest.mark.parametrize("max_samples", [-1, 0, 4, 9])
def test_balanced_indices_keep_everything_unless_max_samples_cuts(max_samples: int) -> None:
    assert balanced_indices(["b", "a", "b", "a"], max_samples, seed=0) == [0, 1, 2, 3]
