"""vLLM-Omni's positions for a video with its soundtrack, against the actor's (transformers').

For clips of several lengths, each with a soundtrack shorter, as long as or longer than its
frames, the prompt our dataset encodes for the actor goes through vLLM-Omni's own multimodal
processor (as the engine's frontend runs it, folded by our adapter's processor the way verl's
server sends it), and its Qwen3-Omni thinker's ``get_mrope_input_positions`` is called on the
result (no engine starts). With omni_qwen3's vLLM plugin (:mod:`omni_qwen3.vllm_positions`) the
positions and the delta equal the actor's on every clip; upstream's own are off where the block
ends with a soundtrack shorter than the frames (the canary: when upstream fixes it, drop the plugin).
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


class Engine:
    """vLLM-Omni's processor for the tiny checkpoint, and its thinker's position methods bound
    to a stand-in that holds only the config they read."""

    def __init__(self, model_dir: Path) -> None:
        from vllm.config import ModelConfig
        from vllm.multimodal.processing.context import InputProcessingContext
        from vllm.tokenizers import get_tokenizer
        from vllm_omni.model_executor.models.qwen3_omni import qwen3_omni_moe_thinker

        thinker = qwen3_omni_moe_thinker.Qwen3OmniMoeThinkerForConditionalGeneration
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
        from vllm.multimodal.processing.context import TimingContext
        from vllm.multimodal.processing.inputs import ProcessorInputs
        from vllm.multimodal.utils import argsort_mm_positions

        items = self.processor.info.parse_mm_data(prompt["multi_modal_data"])
        out = self.processor.apply(ProcessorInputs(prompt["prompt_token_ids"], items, None,
                                                   hf_processor_mm_kwargs=prompt["mm_processor_kwargs"]),
                                   TimingContext(enabled=False))
        places = out["mm_placeholders"]
        features = [MultiModalFeatureSpec(data=out["mm_kwargs"][m][i], modality=m, identifier=f"{m}{i}",
                                          mm_position=places[m][i]) for m, i in argsort_mm_positions(places)]
        return list(out["prompt_token_ids"]), features

    def positions(self, ids: list[int], features: list[Any], method: Any) -> tuple[np.ndarray, int]:
        positions, delta = method(self.model, ids, features)
        return positions.numpy(), int(delta)


@pytest.fixture(scope="module")
def tiny() -> Path:
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    return build_tiny_qwen3_omni()


@pytest.fixture(scope="module")
def engine(tiny: Path) -> Engine:
    return Engine(tiny)


@pytest.fixture(scope="module")
def clips(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[tuple[float, float], Any, Any, Any]]:
    return list(encoded_clips(tiny, tmp_path_factory.mktemp("clips")))


def encoded_clips(model_dir: Path, root: Path) -> Iterator[tuple[tuple[float, float], Any, Any, Any]]:
    """Per clip: the actor's row (our dataset), its positions and delta, and the engine prompt."""
    from transformers import AutoConfig

    from omni_contracts import get_rollout_adapter, get_training_adapter
    from omni_data import DatasetConfig, RLDataset, decode_all, media_in_messages, rl_row, settings_from_processor
    from omni_data import write_rl_parquet
    from omni_model_kit.thinker_processor import rope_index_kwargs
    from omni_rollout.vllm_omni.prompts import build_engine_prompt, dedup_function
    from omni_trainer.builtin_files import write_clip

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
        prompt = build_engine_prompt(get_rollout_adapter("qwen3_omni_moe"), item["input_ids"].tolist(),
                                     {"video": media.videos, "audio": media.audios},
                                     {"use_audio_in_video": True, "sampling_rate": RATE},
                                     dedup_pad_tokens=dedup_function(processor))
        yield clip, item, (positions[:, 0].numpy(), int(deltas[0, 0])), prompt


def test_the_plugin_puts_every_token_where_the_actor_does(engine: Engine, clips: list[Any]) -> None:
    from omni_qwen3.vllm_positions import PATCHED_MARK, register

    register()  # what vLLM runs in each of its processes (the entry point)
    method = engine.thinker.get_mrope_input_positions
    assert getattr(method, PATCHED_MARK, False)
    for clip, item, (expected, expected_delta), prompt in clips:
        ids, features = engine.features(prompt)
        assert ids == item["input_ids"].tolist(), clip  # the engine lays the prompt out as the actor's
        positions, delta = engine.positions(ids, features, method)
        assert (positions == expected).all() and delta == expected_delta, clip


def test_upstream_still_misplaces_the_tokens_after_a_soundtrack_that_ends_first(
    engine: Engine, clips: list[Any]
) -> None:
    """The canary: upstream's own positions differ from the actor's where the soundtrack ends
    before the frames, and only there. When this fails, upstream computes transformers'
    positions: drop omni_qwen3.vllm_positions and its entry point."""
    from omni_qwen3.vllm_positions import PATCHED_MARK

    method = engine.thinker.get_mrope_input_positions
    upstream = method.__wrapped__ if getattr(method, PATCHED_MARK, False) else method
    off = []
    for clip, item, (expected, expected_delta), prompt in clips:
        ids, features = engine.features(prompt)
        positions, delta = engine.positions(ids, features, upstream)
        if not ((positions == expected).all() and delta == expected_delta):
            off.append(clip)
    # 1 s of 2 frames (one temporal patch) with less than a second of sound: the block ends
    # with the audio tokens, whose positions stay below the frames' height and width ones.
    assert off == [(2, 2, 0.25), (2, 2, 0.5)], off
