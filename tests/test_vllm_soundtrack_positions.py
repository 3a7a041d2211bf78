"""vLLM-Omni's placeholders and positions for a video with its soundtrack, against the actor's
(transformers').

For clips of several lengths, each with a soundtrack shorter, as long as or longer than its
frames, the prompt our dataset encodes for the actor goes through vLLM-Omni's own multimodal
processor (as the engine's frontend runs it, folded by our adapter's processor the way verl's
server sends it), and its thinker's ``get_mrope_input_positions`` is called on the result (no
engine starts), for the tiny Qwen3-Omni and the tiny Qwen2.5-Omni.

- Qwen3-Omni: with omni_qwen3's vLLM plugin (:mod:`omni_qwen3.vllm_positions`) the positions and
  the delta equal the actor's on every clip; upstream's own are off where the block ends with a
  soundtrack shorter than the frames (the canary: when upstream fixes it, drop the plugin).
- Qwen2.5-Omni: with omni_qwen25's vLLM plugin (:mod:`omni_qwen25.vllm_soundtrack`) the positions
  equal the actor's on every clip, and the video's embeddings go onto the video tokens and the
  audio's onto the audio tokens, as transformers' thinker scatters them. Upstream's positions
  are off on every clip (the block written one token early, its markers on positions of their
  own), and its video placeholder also claims the block's two markers (the canaries).

Needs the cpu-rollout extra (vLLM and vLLM-Omni).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm_omni") is None,
                       reason="needs the cpu-rollout extra (uv sync --extra cpu-rollout)"),
]

CLIPS = [(frames, rate, sound) for frames, rate in ((2, 2), (4, 4), (8, 4), (12, 4))
         for sound in (0.25, 0.5, 1.0, 2.0, 2.5, 3.5)]
"""(frames, their rate, seconds of soundtrack)."""
RATE = 16_000


FAMILIES = {
    "qwen3-omni": ("omni_qwen3.tiny:build_tiny_qwen3_omni", "qwen3_omni_moe",
                   "vllm_omni.model_executor.models.qwen3_omni.qwen3_omni_moe_thinker:"
                   "Qwen3OmniMoeThinkerForConditionalGeneration"),
    "qwen2.5-omni": ("omni_qwen25.tiny:build_tiny_qwen25_omni", "qwen2_5_omni",
                     "vllm_omni.model_executor.models.qwen2_5_omni.qwen2_5_omni_thinker:"
                     "Qwen2_5OmniThinkerForConditionalGeneration"),
}
"""Per model: its tiny checkpoint's builder, its pipeline, and vLLM-Omni's thinker class."""


def load(name: str) -> Any:
    module, attr = name.split(":")
    return getattr(importlib.import_module(module), attr)


class Engine:
    """vLLM-Omni's processor for the tiny checkpoint, and its thinker's position methods bound
    to a stand-in that holds only the config they read."""

    def __init__(self, model_dir: Path, thinker_name: str) -> None:
        from vllm.config import ModelConfig
        from vllm.multimodal.processing.context import InputProcessingContext
        from vllm.tokenizers import get_tokenizer

        thinker = load(thinker_name)
        config = ModelConfig(model=str(model_dir), dtype="float32", max_model_len=4096)
        self.processor = thinker._processor_factory.build_processor(
            InputProcessingContext(config, get_tokenizer(str(model_dir))), cache=None)
        self.model: Any = type("ThinkerPositions", (), {})()
        self.model.config = self.processor.info.get_hf_config()
        for name in ("iter_mm_features", "_get_audio_for_video_mapping", "_compute_interleaved_positions",
                     "_compute_audio_token_count"):
            setattr(self.model, name, getattr(thinker, name).__get__(self.model))
        self.thinker = thinker

    def features(self, prompt: dict[str, Any]) -> tuple[list[int], list[Any]]:
        """The expanded ids and the features the engine's model sees for ``prompt``."""
        from vllm.multimodal.inputs import MultiModalFeatureSpec
        from vllm.multimodal.utils import argsort_mm_positions

        ids, places, kwargs = self.placeholders(prompt)
        return ids, [MultiModalFeatureSpec(data=kwargs[m][i], modality=m, identifier=f"{m}{i}",
                                           mm_position=places[m][i]) for m, i in argsort_mm_positions(places)]

    def placeholders(self, prompt: dict[str, Any]) -> tuple[list[int], Any, Any]:
        """The expanded ids, the placeholder ranges and the media inputs for ``prompt``."""
        from vllm.multimodal.processing.context import TimingContext
        from vllm.multimodal.processing.inputs import ProcessorInputs

        items = self.processor.info.parse_mm_data(prompt["multi_modal_data"])
        out = self.processor.apply(ProcessorInputs(prompt["prompt_token_ids"], items, None,
                                                   hf_processor_mm_kwargs=prompt["mm_processor_kwargs"]),
                                   TimingContext(enabled=False))
        return list(out["prompt_token_ids"]), out["mm_placeholders"], out["mm_kwargs"]

    def positions(self, ids: list[int], features: list[Any], method: Any) -> tuple[np.ndarray, int]:
        positions, delta = method(self.model, ids, features)
        return positions.numpy(), int(delta)


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def tiny(family: str) -> Path:
    return Path(load(FAMILIES[family][0])())


@pytest.fixture(scope="module")
def engine(tiny: Path, family: str) -> Engine:
    return Engine(tiny, FAMILIES[family][2])


@pytest.fixture(scope="module")
def clips(tiny: Path, family: str,
          tmp_path_factory: pytest.TempPathFactory) -> list[tuple[tuple[float, float], Any, Any, Any]]:
    return list(encoded_clips(tiny, FAMILIES[family][1], tmp_path_factory.mktemp("clips")))


def encoded_clips(model_dir: Path, pipeline: str, root: Path) -> Iterator[tuple[tuple[float, float], Any, Any, Any]]:
    """Per clip: the actor's row (our dataset), its positions and delta, and the engine prompt."""
    from transformers import AutoConfig

    from omni_contracts import get_rollout_adapter, get_training_adapter
    from omni_data import DatasetConfig, RLDataset, decode_all, media_in_messages, rl_row, settings_from_processor
    from omni_data import write_rl_parquet
    from omni_model_kit.thinker_processor import rope_index_kwargs
    from omni_rollout.vllm_omni.prompts import build_engine_prompt, dedup_function
    from omni_data.builtin import write_clip

    hf_config = AutoConfig.from_pretrained(model_dir)
    adapter = get_training_adapter(hf_config.architectures[0], "thinker")
    processor = adapter.configure_processor(str(model_dir), hf_config)
    rows = []
    for k, (count, rate, sound) in enumerate(CLIPS):
        frames = [np.full((32, 32, 3), 30 * i % 255, np.uint8) for i in range(count)]
        tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(int(RATE * sound)) / RATE)).astype(np.float32)
        video = write_clip(root / f"clip{k}.mp4", frames, rate, tone[None], RATE)
        rows.append(rl_row(data_source="clip", messages=[{"role": "user", "content": "<video>How many beeps?"}],
                           ground_truth="1", ability="count", extra_info={"index": k}, videos=[str(video)]))
    dataset = RLDataset([str(write_rl_parquet(rows, root / "clips.parquet"))], processor,
                        DatasetConfig(use_audio_in_video=True))
    for k, clip in enumerate(CLIPS):
        item = dataset[k]
        inputs = item["multi_modal_inputs"]
        positions, deltas = processor.get_rope_index(item["input_ids"][None], None, inputs["video_grid_thw"], None,
                                                     **rope_index_kwargs(inputs))
        media = decode_all(media_in_messages(item["raw_prompt"], where="clip"), settings_from_processor(processor),
                           where="clip", use_audio_in_video=True)
        prompt = build_engine_prompt(get_rollout_adapter(pipeline), item["input_ids"].tolist(),
                                     {"video": media.videos, "audio": media.audios},
                                     {"use_audio_in_video": True, "sampling_rate": RATE},
                                     dedup_pad_tokens=dedup_function(processor))
        yield clip, item, (positions[:, 0].numpy(), int(deltas[0, 0])), prompt


UPSTREAM_POSITIONS_OFF = {"qwen3-omni": [(2, 2, 0.25), (2, 2, 0.5)], "qwen2.5-omni": CLIPS}
"""The clips whose positions vLLM-Omni 0.28 computes differently from transformers: for
Qwen3-Omni, 1 s of 2 frames (one temporal patch) with less than a second of sound (the block ends
with the audio tokens, whose positions stay below the frames' height and width ones); for
Qwen2.5-Omni, every clip."""


def register_plugins() -> None:
    """What vLLM runs in each of its processes (the packages' ``vllm.general_plugins`` entry points)."""
    from omni_qwen3.vllm_positions import register as qwen3_positions
    from omni_qwen25.vllm_soundtrack import register as qwen25_soundtrack

    qwen3_positions()
    qwen25_soundtrack()


def embedded(places: Any, modality: str) -> list[int]:
    """The prompt indices that take ``modality``'s embeddings."""
    (place,) = places[modality]
    mask = place.is_embed.tolist() if place.is_embed is not None else [True] * place.length
    return [place.offset + k for k, taken in enumerate(mask) if taken]


def token_ids(engine: Engine) -> tuple[int, int]:
    processor = engine.processor.info.get_hf_processor()
    vocab = engine.processor.info.get_tokenizer().get_vocab()
    return vocab[processor.video_token], vocab[processor.audio_token]


def test_the_engine_puts_every_token_and_embedding_where_the_actor_does(engine: Engine, clips: list[Any]) -> None:
    register_plugins()
    method = engine.thinker.get_mrope_input_positions
    video_id, audio_id = token_ids(engine)
    for clip, item, (expected, expected_delta), prompt in clips:
        ids, places, _ = engine.placeholders(prompt)
        assert ids == item["input_ids"].tolist(), clip  # the engine lays the prompt out as the actor's
        # transformers' thinker scatters the video's features onto its video tokens, the audio's onto its audio
        assert embedded(places, "video") == [k for k, token in enumerate(ids) if token == video_id], clip
        assert embedded(places, "audio") == [k for k, token in enumerate(ids) if token == audio_id], clip
        positions, delta = engine.positions(*engine.features(prompt), method)
        assert (positions == expected).all() and delta == expected_delta, clip


def test_upstream_positions_still_differ_where_a_plugin_corrects_them(
    engine: Engine, clips: list[Any], family: str
) -> None:
    """The canary for the position patches (:mod:`omni_qwen3.vllm_positions`,
    :mod:`omni_qwen25.vllm_soundtrack`): upstream's own positions differ from the actor's on these
    clips, and only there. When this fails, upstream changed: where it now computes transformers'
    positions, drop the patch."""
    method = engine.thinker.get_mrope_input_positions
    upstream = getattr(method, "__wrapped__", method)
    off = []
    for clip, _, (expected, expected_delta), prompt in clips:
        positions, delta = engine.positions(*engine.features(prompt), upstream)
        if not ((positions == expected).all() and delta == expected_delta):
            off.append(clip)
    assert off == UPSTREAM_POSITIONS_OFF[family], off


@pytest.mark.parametrize("family", ["qwen2.5-omni"], indirect=True)  # Qwen3-Omni's masks its video tokens only
def test_upstream_still_counts_the_block_markers_as_video_in_qwen25(
    engine: Engine, clips: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The canary for :mod:`omni_qwen25.vllm_soundtrack`: upstream's video placeholder claims the
    block's ``<|audio_bos|>`` and ``<|audio_eos|>`` as well as its video tokens (the engine then
    stops: 2 more placeholders than embeddings). When this fails, drop the plugin and its entry
    point."""
    register_plugins()
    processor = type(engine.processor)
    monkeypatch.setattr(processor, "_derive_audio_from_video_placeholders",
                        processor._derive_audio_from_video_placeholders.__wrapped__)
    video_id, _ = token_ids(engine)
    for clip, _, _, prompt in clips:
        ids, places, _ = engine.placeholders(prompt)
        videos = [k for k, token in enumerate(ids) if token == video_id]
        claimed = embedded(places, "video")
        assert len(claimed) == len(videos) + 2 and set(videos) < set(claimed), clip
        assert {ids[k] for k in set(claimed) - set(videos)} == {ids[claimed[0]], ids[claimed[-1]]}, clip
