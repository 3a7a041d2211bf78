"""Qwen2-VL's processor with the members omni_contracts.OmniProcessor names, bound to the
checkpoint's config: the placeholder ids it expands, collapsing them for an engine that
expands them again, and the mrope positions computed by transformers' own
``Qwen2VLModel.get_rope_index`` (no model instance needed: it reads only the config)."""

from __future__ import annotations

from typing import Any

import torch
from transformers import Qwen2VLProcessor
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel


class _Positions:
    """What ``Qwen2VLModel.get_rope_index`` reads from ``self``: the config and one helper."""

    get_rope_index = Qwen2VLModel.get_rope_index
    get_vision_position_ids = Qwen2VLModel.get_vision_position_ids

    def __init__(self, config: Any) -> None:
        self.config = config


def token_types(input_ids: torch.Tensor, config: Any) -> torch.Tensor:
    """What the processor returns as ``mm_token_type_ids``: 1 at image pads, 2 at video pads."""
    types = torch.zeros_like(input_ids, dtype=torch.int32)
    types[input_ids == config.image_token_id] = 1
    types[input_ids == config.video_token_id] = 2
    return types


class VisionLMProcessor(Qwen2VLProcessor):
    """transformers' ``Qwen2VLProcessor`` plus the members the engines call by name."""

    model_config: Any = None

    def bind_model_config(self, model_config: Any) -> None:
        for name in ("image_token_id", "video_token_id"):
            if getattr(model_config, name, None) is None:
                raise ValueError(f"The checkpoint's config sets no {name}; set it to the tokenizer's id.")
        self.model_config = model_config

    def _config(self) -> Any:
        if self.model_config is None:
            raise RuntimeError("Load this processor through VisionLMAdapter.configure_processor.")
        return self.model_config

    @property
    def pad_token_ids(self) -> tuple[int, int]:
        """The image and video pads (the processor expands each to its feature length)."""
        config = self._config()
        return (int(config.image_token_id), int(config.video_token_id))

    def dedup_pad_tokens(self, prompt_ids: Any) -> Any:
        """One pad per media item: each run of one pad id collapsed (a list or a 1-D tensor)."""
        is_tensor = isinstance(prompt_ids, torch.Tensor)
        if is_tensor and prompt_ids.dim() != 1:
            raise ValueError(f"dedup_pad_tokens takes one sequence (1-D), got shape {tuple(prompt_ids.shape)}.")
        values = [int(t) for t in (prompt_ids.tolist() if is_tensor else prompt_ids)]
        pads = set(self.pad_token_ids)
        kept = [t for i, t in enumerate(values) if i == 0 or not (t == values[i - 1] and t in pads)]
        return prompt_ids.new_tensor(kept) if is_tensor else kept

    def get_rope_index(
        self,
        input_ids: torch.Tensor,
        image_grid_thw: torch.Tensor | None = None,
        video_grid_thw: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        mm_token_type_ids: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """mrope positions ``[3, batch, seq]`` and deltas ``[batch, 1]``, int64, as the model
        computes them (``mm_token_type_ids`` read from ``input_ids`` when not given)."""
        config = self._config()
        if mm_token_type_ids is None:
            mm_token_type_ids = token_types(input_ids, config)
        rope: Any = _Positions(config)  # transformers' method, run on the config alone
        positions, deltas = rope.get_rope_index(input_ids, mm_token_type_ids, image_grid_thw, video_grid_thw, attention_mask)
        return positions.long(), deltas.long()

    def get_rope_index_kwargs(self, multi_modal_inputs: dict[str, Any]) -> dict[str, Any]:
        """Qwen2-VL's positions need nothing beyond ids, grids, mask and token types."""
        return {}

