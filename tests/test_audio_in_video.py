"""A video with its own soundtrack (``use_audio_in_video``), against the references.

- The soundtrack the dataset decodes (PyAV, librosa) equals the one Qwen's loader
  (``qwen_omni_utils``, through an ffmpeg binary) decodes from the same file.
- On both tiny model families, a row's prompt ids and media features equal what transformers'
  own processor makes of the same frames and soundtrack with ``use_audio_in_video=True``, and
  the mrope positions the engines use equal the thinker's own ``get_rope_index`` with the switch
  on: for several durations, frame rates and sample rates, a soundtrack longer and one shorter
  than the frames, and a standalone audio before and after the video.
- The actor's forward reads the switch through ``collate``: its log-probs equal those at the
  reference positions, and differ from the log-probs without the switch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from omni_contracts import get_training_adapter
from omni_data import DatasetConfig, MediaError, RLDataset, rl_row, settings_from_processor, write_rl_parquet
from omni_data.media import decode, soundtrack
from omni_data.rows import parse_row

sys.path.insert(0, str(Path(__file__).parent))
from test_data_qwen3_processor import picture  # noqa: E402

pytestmark = pytest.mark.slow

FAMILIES = {
    "qwen3-omni": ("Qwen3OmniMoeForConditionalGeneration", "omni_qwen3.tiny", "build_tiny_qwen3_omni"),
    "qwen2.5-omni": ("Qwen2_5OmniForConditionalGeneration", "omni_qwen25.tiny", "build_tiny_qwen25_omni"),
}
CASES = {
    # frames, frame rate, soundtrack seconds, sample rate
    "2s-sound-over-2s-frames": (8, 4, 2.0, 16_000),
    "3.3s-sound-over-2s-frames": (8, 4, 3.3, 44_100),
    "1s-sound-under-3s-frames": (6, 2, 1.0, 22_050),
    "stereo-48k-over-4s-frames": (16, 4, 4.0, 48_000),
}


def write_video_with_sound(path: Path, frames: int, fps: int, seconds: float, rate: int, *, channels: int = 1,
                           size: int = 32) -> str:
    """An mp4 of ``frames`` pictures and an AAC soundtrack of a rising tone, ``seconds`` long."""
    from omni_data.builtin import write_clip

    pictures = [np.asarray(picture(size, size, seed=100 + i)) for i in range(frames)]
    t = np.arange(int(seconds * rate)) / rate
    sound = np.repeat((0.3 * np.sin(2 * np.pi * (300 + 200 * t) * t)).astype(np.float32)[None], channels, axis=0)
    return str(write_clip(path, pictures, fps, sound, rate))


@pytest.fixture(scope="module")
def ffmpeg_on_path(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Qwen's loader decodes a video's sound with an ``ffmpeg`` binary (audioread): the one
    imageio-ffmpeg ships, on PATH for this module."""
    import audioread  # type: ignore[import-untyped]
    import imageio_ffmpeg  # type: ignore[import-untyped]

    folder = tmp_path_factory.mktemp("bin")
    (folder / "ffmpeg").symlink_to(imageio_ffmpeg.get_ffmpeg_exe())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
        audioread.available_backends(flush_cache=True)  # librosa asks it, and it caches what it found
        yield
    audioread.available_backends(flush_cache=True)


def qwen_soundtrack(path: str) -> np.ndarray:
    from qwen_omni_utils.v2_5.audio_process import process_audio_info  # type: ignore[import-untyped]

    (audio,) = process_audio_info([{"role": "user", "content": [{"type": "video", "video": path}]}], True)
    return np.asarray(audio)


@pytest.mark.parametrize("case", CASES)
def test_the_soundtrack_is_what_qwens_loader_decodes(case: str, ffmpeg_on_path: None, tmp_path: Path) -> None:
    """Same length to the sample (the AAC track's padded last frame is trimmed, as ffmpeg
    trims it), and the same samples to 16-bit precision (ffmpeg hands audioread int16)."""
    frames, fps, seconds, rate = CASES[case]
    path = write_video_with_sound(tmp_path / "clip.mp4", frames, fps, seconds, rate, channels=2 if "stereo" in case else 1)
    (ref,) = parse_row(row("<video>?", videos=[path]), where="row 0").media
    ours = soundtrack(ref, settings_from_processor(None), where="row 0")
    theirs = qwen_soundtrack(path)
    assert ours.dtype == np.float32 and ours.shape == theirs.shape == (int(round(seconds * 16_000)),)
    assert np.abs(ours - theirs).max() < 2e-4


def row(content: str, **media: Any) -> dict[str, Any]:
    return rl_row(data_source="synthetic", messages=[{"role": "user", "content": content}], ground_truth="1",
                  ability="test", extra_info={"split": "test", "index": 0}, **media)


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """The family's tiny checkpoint as the actor loads it, and the adapter's processor."""
    import importlib

    from omni_training.actor import Actor
    from omni_training.policy_loss import PolicyLossConfig
    from omni_training.settings import NO_LORA, ActorSettings, OptimizerSettings

    architecture, module, builder = FAMILIES[request.param]
    checkpoint = getattr(importlib.import_module(module), builder)(tmp_path_factory.mktemp("tiny") / request.param, seed=0)
    settings = ActorSettings(
        loss_mode="vanilla", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"), gradient_checkpointing=False
    )
    actor = Actor.from_pretrained(
        str(checkpoint), get_training_adapter(architecture, "thinker"),
        settings=settings, lora=NO_LORA, optim=OptimizerSettings(lr=1e-6),
    )
    return actor, actor.adapter.configure_processor(str(checkpoint), actor.model_config)


def thinker(actor: Any) -> Any:
    return actor.model.thinker


def reference(processor: Any, parsed: Any, soundtracks: list[np.ndarray]) -> dict[str, Any]:
    """transformers' processor on the row's frames and audio with the switch on (the frames as
    the dataset samples them; each soundtrack as Qwen's loader decodes it)."""
    settings = settings_from_processor(processor)
    audios, videos, metadata, tracks = [], [], [], iter(soundtracks)
    for medium in parsed.media:
        value = decode(medium, settings, where="reference")
        if medium.kind == "audio":
            audios.append(value)
        else:
            videos.append(value[0])
            metadata.append(value[1])
            audios.append(next(tracks))
    content = [p if p["type"] == "text" else {"type": p["type"]} for p in parsed.messages[0]["content"]]
    text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                         tokenize=False)
    return dict(processor(text=[text], audio=audios, videos=videos, video_metadata=metadata, do_sample_frames=False,
                          use_audio_in_video=True, return_tensors="pt"))


def audio_tokens(processor: Any, samples: np.ndarray) -> int:
    """The audio tokens the processor gives ``samples`` as a standalone audio item."""
    text = processor.apply_chat_template([{"role": "user", "content": [{"type": "audio"}]}],
                                         add_generation_prompt=True, tokenize=False)
    ids = processor(text=[text], audio=[samples], return_tensors="pt")["input_ids"][0]
    return int((ids == processor.thinker_config.audio_token_id).sum())


@pytest.mark.parametrize("layout", ["video", "audio-then-video", "video-then-audio"])
@pytest.mark.parametrize("case", CASES)
def test_interleaved_prompts_equal_transformers(case: str, layout: str, family: tuple[Any, Any], ffmpeg_on_path: None,
                                                 tmp_path: Path) -> None:
    actor, processor = family
    frames, fps, seconds, rate = CASES[case]
    video = write_video_with_sound(tmp_path / "clip.mp4", frames, fps, seconds, rate)
    tone = tmp_path / "tone.wav"
    import soundfile as sf  # type: ignore[import-untyped]

    sf.write(tone, np.sin(np.arange(8_000) / 16_000 * 2 * np.pi * 300).astype(np.float32), 16_000)
    prompt = {"video": "<video>What do you see and hear?", "audio-then-video": "<audio>Then <video>Same sound?",
              "video-then-audio": "<video>And then <audio>Same sound?"}[layout]
    media: dict[str, Any] = {"videos": [video]} | ({"audios": [str(tone)]} if "audio" in layout else {})
    raw = row(prompt, **media)
    dataset = RLDataset([str(write_rl_parquet([raw], tmp_path / "rows.parquet"))], processor,
                        DatasetConfig(use_audio_in_video=True, mm_processor_kwargs={"use_audio_in_video": True}))
    ours = dataset[0]
    expected = reference(processor, parse_row(raw, where="reference"), [qwen_soundtrack(video)])

    assert torch.equal(ours["input_ids"], expected["input_ids"][0])
    inputs = ours["multi_modal_inputs"]
    assert inputs["use_audio_in_video"] is True
    assert set(inputs) - {"use_audio_in_video"} == {k for k in expected if k not in ("input_ids", "attention_mask")}
    for key, value in inputs.items():
        if key == "input_features":  # log-mel of int16 vs float samples: a few thousandths
            torch.testing.assert_close(value, expected[key], atol=0.05, rtol=0)
        elif key != "use_audio_in_video":
            assert torch.equal(value, expected[key]), key
    # Every token of the soundtrack sits in the video's run of frame and sound tokens.
    ids = ours["input_ids"]
    config = processor.thinker_config
    start = end = int(torch.nonzero(ids == config.video_token_id)[0])
    while end < len(ids) and int(ids[end]) in (config.video_token_id, config.audio_token_id):
        end += 1
    heard = int((ids[start:end] == config.audio_token_id).sum())
    assert heard == audio_tokens(processor, qwen_soundtrack(video))
    assert dataset.report.soundtrack_tokens == [heard]  # the load report's count per row
    feature_lengths = expected["feature_attention_mask"].sum(-1)

    ids, mask = ids[None], ours["attention_mask"][None]
    positions, _ = processor.get_rope_index(ids, None, inputs["video_grid_thw"], mask,
                                            **processor.get_rope_index_kwargs(inputs))
    upstream, _ = thinker(actor).get_rope_index(ids, None, expected["video_grid_thw"], mask, True,
                                                feature_lengths, expected["video_second_per_grid"])
    assert torch.equal(positions, upstream.long())
    without, _ = thinker(actor).get_rope_index(ids, None, expected["video_grid_thw"], mask, False,
                                               feature_lengths, expected["video_second_per_grid"])
    assert not torch.equal(positions, without.long())  # the switch changes the positions: it is read
    # verl's agent loop passes no switch: the processor sees the interleaved block in the ids.
    kwargs = {k: v for k, v in processor.get_rope_index_kwargs(inputs).items() if k != "use_audio_in_video"}
    detected, _ = processor.get_rope_index(ids, None, inputs["video_grid_thw"], mask, **kwargs)
    assert torch.equal(detected, upstream.long())


def test_the_actor_reads_the_switch_through_collate(family: tuple[Any, Any], tmp_path: Path) -> None:
    """``collate`` carries ``use_audio_in_video`` to the forward: the log-probs equal those at
    the thinker's positions for the interleaved prompt, and not those of a forward that was
    never told (which lays the block out as audio alone)."""
    from omni_training.batching import MicroBatch, collate

    actor, processor = family
    video = write_video_with_sound(tmp_path / "clip.mp4", 8, 4, 2.0, 16_000)
    dataset = RLDataset([str(write_rl_parquet([row("<video>Say it.", videos=[video])], tmp_path / "rows.parquet"))],
                        processor, DatasetConfig(use_audio_in_video=True))
    item = dataset[0]
    prompt = {"input_ids": item["input_ids"][None], "attention_mask": item["attention_mask"][None],
              **item["multi_modal_inputs"]}
    response = torch.tensor(processor.tokenizer.encode("Three apples."))
    pad = processor.tokenizer.pad_token_id

    def log_probs(prompts: list[dict[str, Any]]) -> torch.Tensor:
        model_inputs, responses, mask = collate(prompts, [response] * len(prompts), pad_token_id=pad)
        (values,) = actor.compute_log_probs([MicroBatch(model_inputs, responses, mask)])
        return values

    told = log_probs([prompt])
    positions, _ = processor.get_rope_index(prompt["input_ids"], None, prompt["video_grid_thw"],
                                            prompt["attention_mask"], **processor.get_rope_index_kwargs(prompt))
    at_positions = log_probs([{**prompt, "position_ids": positions}])
    untold = log_probs([{k: v for k, v in prompt.items() if k != "use_audio_in_video"}])
    torch.testing.assert_close(told, at_positions, atol=1e-5, rtol=0)
    assert (told - untold).abs().max() > 1e-4
    with pytest.raises(ValueError, match="Prompts disagree on 'use_audio_in_video'"):
        collate([prompt, {**prompt, "use_audio_in_video": False}], [response] * 2, pad_token_id=pad)


def test_a_video_without_sound_is_a_bad_row_and_max_frames_spreads_the_frames_over_the_soundtrack(
        family: tuple[Any, Any], tmp_path: Path) -> None:
    """A silent video (or one given as frame images) is dropped and counted as
    ``no_soundtrack`` (``on_bad_row=skip``) or fails the load naming it (``raise``); where
    ``max_frames`` bounds the frames, they spread over the whole clip, as Qwen's loader takes
    them, and the whole soundtrack is heard."""
    from test_data_qwen3_processor import png_bytes, write_mp4

    _, processor = family
    silent = write_mp4(tmp_path / "silent.mp4", frames=4, fps=4, size=32)
    frames = [{"bytes": png_bytes(32, 32, seed=i), "path": f"f{i}.png"} for i in range(4)]
    sounding = write_video_with_sound(tmp_path / "clip.mp4", 16, 4, 4.0, 16_000)
    rows = [row("<video>?", videos=[silent]), row("<video>?", videos=[sounding])]
    files = [str(write_rl_parquet(rows, tmp_path / "rows.parquet")),  # one form of video per file
             str(write_rl_parquet([row("<video>?", videos=[frames])], tmp_path / "frames.parquet"))]
    dataset = RLDataset(files, processor, DatasetConfig(use_audio_in_video=True, on_bad_row="skip"))
    assert len(dataset) == 1 and dict(dataset.report.dropped) == {"no_soundtrack": 2}
    with pytest.raises(MediaError, match="has no audio stream to hear") as caught:
        RLDataset(files, processor, DatasetConfig(use_audio_in_video=True))
    assert caught.value.reason == "no_soundtrack"

    settings = settings_from_processor(processor, video_fps=2.0, video_max_frames=4)
    (medium,) = parse_row(row("<video>?", videos=[sounding]), where="row 0").media
    frames_sampled, metadata = decode(medium, settings, where="row 0")
    assert len(frames_sampled) == 4 and metadata["fps"] == 1.0  # 4 frames over the 4 seconds, not the first 2
    assert soundtrack(medium, settings, where="row 0").shape == (4 * 16_000,)


def test_the_switch_is_said_once() -> None:
    with pytest.raises(ValueError, match="mm_processor_kwargs has use_audio_in_video=True but use_audio_in_video is"):
        DatasetConfig(mm_processor_kwargs={"use_audio_in_video": True})


def ffmpeg_soundtrack(path: str) -> np.ndarray:
    """verl-omni's ``NextQARLHFDataset`` decoding: the first audio stream, mono, 16 kHz, float32."""
    import subprocess

    import imageio_ffmpeg

    command = [imageio_ffmpeg.get_ffmpeg_exe(), "-nostdin", "-v", "error", "-i", path, "-map", "0:a:0", "-vn",
               "-ac", "1", "-ar", "16000", "-f", "f32le", "pipe:1"]
    return np.frombuffer(subprocess.run(command, capture_output=True, check=True).stdout, dtype="<f4").copy()


RESAMPLING_GAP = {"2s-sound-over-2s-frames": 0.0, "1s-sound-under-3s-frames": 5e-3}
"""Largest sample difference from verl-omni's decoding: none at a 16 kHz source; a 22.05 kHz one
is resampled as Qwen's loader resamples (librosa's soxr), verl-omni's with ffmpeg's resampler."""


@pytest.mark.parametrize("case", RESAMPLING_GAP)
def test_a_soundtrack_as_an_audio_item_is_verl_omnis_nextqa_layout(case: str, family: tuple[Any, Any],
                                                                    tmp_path: Path) -> None:
    """``soundtrack_as_audio``: each video, then its soundtrack as an audio item of its own (not
    interleaved). The prompt equals transformers' processor given verl-omni's messages (video,
    then audio) and the track as verl-omni decodes it (ffmpeg, mono, 16 kHz), to the sample where
    no resampling is involved; the rollout's copy of the prompt (``raw_prompt``, read back as
    verl's agent loop reads it) decodes the same track."""
    from omni_data.media import decode_all
    from omni_data.rows import media_in_messages, raw_prompt

    _, processor = family
    frames, fps, seconds, rate = CASES[case]
    video = write_video_with_sound(tmp_path / "clip.mp4", frames, fps, seconds, rate)
    path = str(write_rl_parquet([row("Listen and look: <video> How many tones?", videos=[video])], tmp_path / "r.parquet"))
    item = RLDataset([path], processor, DatasetConfig(soundtrack_as_audio=True))[0]

    theirs = ffmpeg_soundtrack(video)
    settings = settings_from_processor(processor)
    (medium,) = parse_row(row("<video>", videos=[video]), where="reference").media
    frames_sampled, metadata = decode(medium, settings, where="reference")
    content = [{"type": "text", "text": "Listen and look: "}, {"type": "video"}, {"type": "audio"},
               {"type": "text", "text": " How many tones?"}]
    text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                         tokenize=False)
    expected = processor(text=[text], audio=[theirs], videos=[frames_sampled], video_metadata=[metadata],
                         do_sample_frames=False, return_tensors="pt")
    assert torch.equal(item["input_ids"], expected["input_ids"][0])
    inputs = item["multi_modal_inputs"]
    assert "use_audio_in_video" not in inputs
    assert torch.equal(inputs["pixel_values_videos"], expected["pixel_values_videos"])
    if RESAMPLING_GAP[case] == 0.0:
        assert torch.equal(inputs["input_features"], expected["input_features"])

    messages = item["raw_prompt"]
    assert [part["type"] for part in messages[0]["content"]] == ["text", "video", "audio", "text"]
    media = decode_all(media_in_messages(messages, where="rollout"), settings, where="rollout")
    (heard,) = media.audios or []
    assert heard.shape == theirs.shape and np.abs(heard - theirs).max() <= RESAMPLING_GAP[case]


def test_a_soundtrack_as_audio_needs_a_video_file_with_sound(family: tuple[Any, Any], tmp_path: Path) -> None:
    from test_data_qwen3_processor import png_bytes, write_mp4

    _, processor = family
    silent = write_mp4(tmp_path / "silent.mp4", frames=4, fps=4, size=32)
    frames = [{"bytes": png_bytes(32, 32, seed=i), "path": f"f{i}.png"} for i in range(4)]
    files = [str(write_rl_parquet([row("<video>?", videos=[silent])], tmp_path / "silent.parquet")),
             str(write_rl_parquet([row("<video>?", videos=[frames])], tmp_path / "frames.parquet"))]
    dataset = RLDataset(files, processor, DatasetConfig(soundtrack_as_audio=True, on_bad_row="skip"))
    assert len(dataset) == 0 and dict(dataset.report.dropped) == {"no_soundtrack": 2}
    with pytest.raises(ValueError, match="soundtrack_as_audio and use_audio_in_video both hear"):
        DatasetConfig(soundtrack_as_audio=True, use_audio_in_video=True)
