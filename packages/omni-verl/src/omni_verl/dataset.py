"""verl's ``data.custom_cls``: omni-data's RL dataset in the row shape verl's agent loop reads.

omni-data loads the RL parquet, checks every row, decodes its media once and filters
overlong prompts (counted and reported). verl's agent loop then templates and tokenizes
the messages itself, so a row here is ``raw_prompt`` (messages with media references)
plus the reward fields; the processor's tensors are not shipped. The agent loop decodes
a prompt's media through the dataset class (``process_multi_modal_info``), here with
omni-data's decoders -- the local engine's -- so both engines see the same pixels and
the same 16 kHz float32 audio, each video's soundtrack among the audios with
``data.use_audio_in_video`` (verl-omni's key, read from verl's data config).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from omni_data import DatasetConfig, RLDataset, decode_all, media_in_messages, settings_from_processor
from omni_verl.processor import adapter_processor
from omni_verl.settings import SETTINGS_ENV, VerlSettings


class OmniRLHFDataset(Dataset):
    """Constructed by verl's ``create_rl_dataset`` with its keyword arguments."""

    def __init__(
        self,
        data_files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        tokenizer: Any,
        config: Any,
        processor: Any = None,
        max_samples: int = -1,
    ) -> None:
        # verl's own processor is None for Qwen3-Omni (see engines.verl.processor): inside a
        # verl run, templating needs the adapter's, which carries the chat template.
        settings = VerlSettings.from_env() if os.environ.get(SETTINGS_ENV) else None
        if processor is None and settings is not None:
            processor = adapter_processor(settings)
        self.dataset = RLDataset(
            list(data_files) if not isinstance(data_files, (str, os.PathLike)) else data_files,
            processor if processor is not None else tokenizer,
            DatasetConfig(
                max_prompt_length=int(config.get("max_prompt_length", 1024)),
                filter_overlong_prompts=bool(config.get("filter_overlong_prompts", True)),
                prompt_key=str(config.get("prompt_key", "prompt")),
                on_bad_row=str(config.get("on_bad_row", "raise")),  # type: ignore[arg-type]
                mm_processor_kwargs=dict(config.get("mm_processor_kwargs") or {}),
                use_audio_in_video=bool(config.get("use_audio_in_video", False)),
                soundtrack_as_audio=bool(config.get("soundtrack_as_audio", False)),
                # a speech stage scores the audio, never against a ground truth
                require_ground_truth=settings is None or settings.stage != "talker",
            ),
        )
        print(self.dataset.report.format(), flush=True)
        size = len(self.dataset)
        self.size = size if max_samples is None or max_samples < 0 else min(size, max_samples)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, item: int) -> dict[str, Any]:
        row = self.dataset[item]
        extra_info = dict(row["extra_info"])
        return {
            "raw_prompt": row["raw_prompt"],
            "data_source": row["data_source"],
            "reward_model": row["reward_model"],
            "ability": row["ability"],
            "extra_info": extra_info,
            "index": row["index"],
            "tools_kwargs": extra_info.get("tools_kwargs", {}),
            "interaction_kwargs": extra_info.get("interaction_kwargs", {}),
            "dummy_tensor": torch.tensor([0], dtype=torch.uint8),
        }

    @classmethod
    async def process_multi_modal_info(
        cls, messages: list[dict[str, Any]], image_patch_size: int = 14, config: Any = None
    ) -> tuple[list[Any] | None, list[Any] | None, list[Any] | None]:
        """``(images, videos, audios)`` of a ``raw_prompt``, each ``None`` when absent.

        Called by verl's agent loop for every rollout; ``image_patch_size`` is verl's reading
        of the same processor the settings come from.
        """
        processor = adapter_processor(VerlSettings.from_env())
        settings = settings_from_processor(
            processor,
            video_fps=float(_get(config, "video_fps", 2.0)),
            video_max_frames=int(_get(config, "video_max_frames", 32)),
        )
        media = decode_all(media_in_messages(messages, where="a rollout prompt"), settings, where="a rollout prompt",
                           use_audio_in_video=bool(_get(config, "use_audio_in_video", False)))
        return media.images, media.videos, media.audios

    @classmethod
    async def process_vision_info(
        cls, messages: list[dict[str, Any]], image_patch_size: int = 14, config: Any = None
    ) -> tuple[list[Any] | None, list[Any] | None]:
        images, videos, _ = await cls.process_multi_modal_info(messages, image_patch_size, config)
        return images, videos


def _get(config: Any, key: str, default: Any) -> Any:
    return default if config is None else config.get(key, default)
