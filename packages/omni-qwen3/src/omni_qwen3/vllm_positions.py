"""Where vLLM places the tokens after a video with its soundtrack, corrected to transformers' rule.

With ``use_audio_in_video``, Qwen3-Omni lays a video's frames and its soundtrack's audio tokens
out interleaved in time, one block between ``<|audio_start|>`` and ``<|audio_end|>``. The block
is built chunk by chunk; when one medium runs out, the rest of the other closes it.
transformers (``modeling_qwen3_omni_moe.py``, ``get_rope_index``: ``st_idx =
llm_pos_ids_list[-1].max() + 1``) starts the tokens after the block one past the largest
position of that last run. vLLM (``vllm/model_executor/models/qwen3_omni_moe_thinker.py``,
``get_mrope_input_positions``) and vLLM-Omni's copy of it
(``vllm_omni/model_executor/models/qwen3_omni/qwen3_omni_moe_thinker.py``: ``st_idx =
int(pos_ids.max()) + 1``) start them one past the largest position of the whole block.

The two agree when the block ends with frames (their height and width positions are the
block's largest), and differ when it ends with audio whose last position is below the frames'
largest: a soundtrack that stops before the frames, such as a 1-second clip of 2 frames with a
half-second sound (the text after the block, and every sampled token, 5 positions off; 0.016 to
0.03 nats of log-prob on the tiny model). The actor computes transformers' positions, so the
rollout's samples would be drawn from a policy a little off the one trained.

:func:`register` is a vLLM general plugin (entry point ``vllm.general_plugins``, which vLLM
loads in every process it starts, on every platform). It wraps vLLM-Omni's thinker's
``get_mrope_input_positions``: vLLM's positions, then, for each interleaved block, the tokens
after it moved back onto transformers' positions. vLLM offers no hook for a model's position
rule, so this is a patch of that one method, in this one place;
``tests/test_vllm_soundtrack_positions.py`` fails when upstream's positions change under it (the
canary) and checks the result against transformers' ``get_rope_index`` on clips of several
lengths. A ``VLLM_PLUGINS`` that leaves :data:`PLUGIN_NAME` out is refused by the pre-flight
(``RolloutAdapter.vllm_plugins``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from omni_model_kit.vllm_positions import Block, trailing_run, with_corrected_positions

PLUGIN_NAME = "omni_qwen3_soundtrack_positions"
"""Its entry-point name (pyproject.toml), as ``VLLM_PLUGINS`` would list it."""
PATCHED_MARK = "_omni_rl_transformers_block_ends"
"""Set on the wrapper, so a second ``register`` in the same process changes nothing."""


def move_block_ends(positions: np.ndarray, input_tokens: Sequence[int], blocks: Sequence[Block]) -> np.ndarray:
    """``positions`` ([3, L], vLLM's) with the tokens after each interleaved block moved back
    to start one past the largest position of the block's last run, as transformers places them.

    ``blocks``: ``(offset, length, _)`` of each block, in prompt order: ``offset`` is its
    ``<|audio_start|>``, the ``length`` frame and audio tokens follow it.
    """
    fixed = positions.copy()
    for offset, length, _ in blocks:
        first, after = offset + 1, offset + 1 + length
        if length == 0 or after >= fixed.shape[1]:
            continue
        run = trailing_run(input_tokens[first:after])
        shift = int(fixed[:, after].max()) - (int(fixed[:, after - run:after].max()) + 1)
        if shift > 0:
            fixed[:, after:] -= shift
    return fixed


def register() -> None:
    """The ``vllm.general_plugins`` entry point: wrap vLLM-Omni's Qwen3-Omni thinker once per
    process. Without vLLM-Omni (the local engine's install) there is nothing to wrap."""
    try:
        from vllm_omni.model_executor.models.qwen3_omni import qwen3_omni_moe_thinker as module
    except ImportError:
        return
    thinker = module.Qwen3OmniMoeThinkerForConditionalGeneration
    if getattr(thinker.get_mrope_input_positions, PATCHED_MARK, False):
        return
    thinker.get_mrope_input_positions = with_corrected_positions(
        thinker.get_mrope_input_positions, move_block_ends, PATCHED_MARK)
