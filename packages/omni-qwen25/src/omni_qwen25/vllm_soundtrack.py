"""A video with its soundtrack in vLLM-Omni's Qwen2.5-Omni thinker, laid out as transformers lays it.

With ``use_audio_in_video``, Qwen2.5-Omni writes a video and its soundtrack as
``<|vision_bos|><|audio_bos|>`` [frames and audio chunks, interleaved in time]
``<|audio_eos|><|vision_eos|>``. vLLM-Omni 0.28
(``vllm_omni/model_executor/models/qwen2_5_omni/qwen2_5_omni_thinker.py``) differs from
transformers' thinker (``modeling_qwen2_5_omni.py``) in two places:

- **Placeholders** (``_derive_audio_from_video_placeholders``). The block's video placeholder takes
  "every token that is not audio" as video, the two audio markers included, so the request dies:
  "Attempted to assign 144 + 12 = 156 multimodal tokens to 158 placeholders". transformers
  scatters the video's features onto its video tokens only (vLLM-Omni's Qwen3-Omni twin does too).
- **Positions** (``get_mrope_input_positions``). transformers gives the two opening markers one
  position, the two closing markers one position (one past the largest position of the block's
  last run, ``st_idx = llm_pos_ids_list[-1].max() + 1``), and the block the positions in between.
  vLLM-Omni starts the block's positions at the placeholder's first token, ``<|audio_bos|>``: every
  frame and audio token takes its neighbour's position, and the text after the block sits 2 or
  more positions late.

:func:`register` is a vLLM general plugin (entry point ``vllm.general_plugins``, loaded in every
process vLLM starts). It wraps those two methods: the video placeholder masks its video tokens,
and the positions of each block and of the tokens after it are moved onto transformers'. vLLM
offers no hook for a model's placeholder split or position rule, so these are patches of two
methods, in this one place. ``tests/test_vllm_soundtrack_positions.py`` checks the result against
transformers' ``get_rope_index`` on clips of several lengths and fails when upstream changes
under either patch (the canaries); ``tests/test_tiny_models_on_vllm_cpu.py`` samples from the
engine on such a request against transformers' thinker. A ``VLLM_PLUGINS`` that leaves
:data:`PLUGIN_NAME` out is refused by the pre-flight (``RolloutAdapter.vllm_plugins``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from omni_model_kit.vllm_positions import Block, trailing_run, with_corrected_positions

PLUGIN_NAME = "omni_qwen25_soundtrack"
"""Its entry-point name (pyproject.toml), as ``VLLM_PLUGINS`` would list it."""
PATCHED_MARK = "_omni_rl_transformers_soundtrack"
"""Set on each wrapper, so a second ``register`` in the same process changes nothing."""
MARKERS = 2
"""``<|audio_bos|>`` and ``<|audio_eos|>``: the block's placeholder holds them around its tokens."""


def video_tokens_only(placeholders: Mapping[str, list[Any]], video_token_id: int) -> dict[str, list[Any]]:
    """``placeholders`` with each video placeholder's ``is_embed`` set to its video tokens (the
    block's markers and audio tokens take no video embedding)."""
    import dataclasses

    import torch

    fixed = dict(placeholders)
    if "video" in fixed:
        fixed["video"] = [
            dataclasses.replace(item, is_embed=torch.tensor(item.tokens) == video_token_id) for item in fixed["video"]
        ]
    return fixed


def transformers_block_positions(
    positions: np.ndarray, input_tokens: Sequence[int], blocks: Sequence[Block]
) -> np.ndarray:
    """``positions`` ([3, L], vLLM-Omni's) with each interleaved block and the tokens after it on
    transformers' positions.

    ``blocks``: ``(offset, count, length)`` of each block, in prompt order: ``offset`` is its
    ``<|audio_bos|>`` (the placeholder's first token; ``<|vision_bos|>`` precedes it), the
    ``count`` frame and audio tokens follow it, then ``<|audio_eos|><|vision_eos|>``. vLLM-Omni
    computed the block's positions right and wrote them from ``offset``, one token early. A block
    whose placeholder does not hold the two markers around its tokens (``length``) is left.
    """
    fixed = positions.copy()
    for offset, count, length in blocks:
        if length != count + MARKERS or offset < 1 or offset + count + MARKERS > fixed.shape[1]:
            continue
        block = fixed[:, offset:offset + count].copy()
        largest = int(block.max())
        fixed[:, offset] = fixed[:, offset - 1]  # <|audio_bos|> shares <|vision_bos|>'s position
        fixed[:, offset + 1:offset + 1 + count] = block
        run = trailing_run(input_tokens[offset + 1:offset + 1 + count])
        closing = int(block[:, count - run:].max()) + 1
        end = offset + 1 + count
        fixed[:, end:end + MARKERS] = closing  # <|audio_eos|> and <|vision_eos|>, clipped at the prompt's end
        after = end + MARKERS
        if after < fixed.shape[1]:  # vLLM-Omni counted on from the block's largest, after its last token
            fixed[:, after:] -= (largest + 1 + MARKERS + 1) - (closing + 1)
    return fixed


def with_video_tokens_only(original: Callable[..., Mapping[str, list[Any]]]) -> Callable[..., dict[str, list[Any]]]:
    """``_derive_audio_from_video_placeholders`` whose video placeholders embed video tokens only."""

    @functools.wraps(original)  # upstream's stays reachable as __wrapped__ (the canary test calls it)
    def _derive_audio_from_video_placeholders(self: Any, *args: Any, **kwargs: Any) -> dict[str, list[Any]]:
        placeholders = original(self, *args, **kwargs)
        processor = self.info.get_hf_processor()
        video_token_id = self.info.get_tokenizer().get_vocab()[processor.video_token]
        return video_tokens_only(placeholders, video_token_id)

    setattr(_derive_audio_from_video_placeholders, PATCHED_MARK, True)
    return _derive_audio_from_video_placeholders


def register() -> None:
    """The ``vllm.general_plugins`` entry point: wrap vLLM-Omni's Qwen2.5-Omni thinker and its
    processor once per process. Without vLLM-Omni (the local engine's install) there is nothing
    to wrap."""
    try:
        from vllm_omni.model_executor.models.qwen2_5_omni import qwen2_5_omni_thinker as module
    except ImportError:
        return
    processor = module.Qwen2_5OmniThinkerMultiModalProcessor
    if not getattr(processor._derive_audio_from_video_placeholders, PATCHED_MARK, False):
        processor._derive_audio_from_video_placeholders = with_video_tokens_only(
            processor._derive_audio_from_video_placeholders
        )
    thinker = module.Qwen2_5OmniThinkerForConditionalGeneration
    if not getattr(thinker.get_mrope_input_positions, PATCHED_MARK, False):
        thinker.get_mrope_input_positions = with_corrected_positions(
            thinker.get_mrope_input_positions, transformers_block_positions, PATCHED_MARK)
