"""verl's ``data.custom_cls``: omni-data's RL dataset in the row shape verl's agent loop reads.

omni-data loads the RL parquet, checks every row, decodes its media once and filters
overlong prompts (counted and reported). verl's agent loop then templates and tokenizes
the messages itself, so a row here is ``raw_prompt`` (messages with media references)
plus the reward fields; the processor's tensors are not shipped.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from omni_data import DatasetConfig, RLDataset


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
        self.dataset = RLDataset(
            list(data_files) if not isinstance(data_files, (str, os.PathLike)) else data_files,
            processor if processor is not None else tokenizer,
            DatasetConfig(
                max_prompt_length=int(config.get("max_prompt_length", 1024)),
                filter_overlong_prompts=bool(config.get("filter_overlong_prompts", True)),
                prompt_key=str(config.get("prompt_key", "prompt")),
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
