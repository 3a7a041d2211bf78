"""The corrections omni_qwen25's vLLM plugin applies to a video-with-soundtrack block (vLLM-Omni's
own placeholders and positions are checked against transformers' in
``tests/test_vllm_soundtrack_positions.py``, with the cpu-rollout extra)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from omni_qwen25.vllm_soundtrack import transformers_block_positions, video_tokens_only

TEXT, VISION_BOS, AUDIO_BOS, V, A, AUDIO_EOS, VISION_EOS = 9, 1, 2, 5, 7, 3, 4


@dataclass
class Placeholder:
    """The fields of vLLM's ``PlaceholderFeaturesInfo`` (a dataclass too)."""

    modality: str
    item_idx: int
    start_idx: int
    tokens: list[int]
    is_embed: torch.Tensor | None


def rows(*columns: tuple[int, int, int]) -> np.ndarray:
    return np.array(columns).T


def test_the_block_moves_one_token_later_and_its_markers_share_positions() -> None:
    tokens = [TEXT, VISION_BOS, AUDIO_BOS, V, V, A, AUDIO_EOS, VISION_EOS, TEXT]
    block = [(2, 2, 2), (2, 2, 3), (2, 2, 2)]  # two frame tokens and one audio token, from position 2
    # vLLM-Omni: the block written from <|audio_bos|> on, then text counted on from its largest (3)
    upstream = rows((0, 0, 0), (1, 1, 1), *block, (4, 4, 4), (5, 5, 5), (6, 6, 6), (7, 7, 7))
    fixed = transformers_block_positions(upstream, tokens, [(2, 3, 5)])
    # transformers: both opening markers on 1, the block after them, both closing markers one past
    # the last run's largest (the audio token's 2), the text after them
    assert fixed.T.tolist() == [[0] * 3, [1] * 3, [1] * 3, *map(list, block), [3] * 3, [3] * 3, [4] * 3]
    assert upstream[:, 2].tolist() == [2, 2, 2]  # the input is left as it was


def test_a_block_that_ends_with_frames_closes_one_past_their_largest() -> None:
    tokens = [VISION_BOS, AUDIO_BOS, A, V, V, AUDIO_EOS, VISION_EOS, TEXT, TEXT]
    block = [(1, 1, 1), (1, 1, 1), (1, 1, 2)]
    upstream = rows((0, 0, 0), *block, (3, 3, 3), (4, 4, 4), (5, 5, 5), (6, 6, 6), (7, 7, 7))
    fixed = transformers_block_positions(upstream, tokens, [(1, 3, 5)])
    assert fixed[0].tolist() == [0, 0, 1, 1, 1, 3, 3, 4, 5]  # the frames' largest is 2, in their width
    assert fixed[2].tolist() == [0, 0, 1, 1, 2, 3, 3, 4, 5]


def test_two_blocks_are_corrected_in_turn_and_a_truncated_one_is_left() -> None:
    one = [VISION_BOS, AUDIO_BOS, V, A, AUDIO_EOS, VISION_EOS]
    tokens = one + one
    upstream = rows((0, 0, 0), (1, 1, 1), (1, 1, 1), (2, 2, 2), (3, 3, 3), (4, 4, 4),
                    (5, 5, 5), (6, 6, 6), (6, 6, 6), (7, 7, 7), (8, 8, 8), (9, 9, 9))
    fixed = transformers_block_positions(upstream, tokens, [(1, 2, 4), (7, 2, 4)])
    assert fixed[0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert (transformers_block_positions(upstream, tokens, [(11, 2, 4)]) == upstream).all()  # runs past the end
    assert (transformers_block_positions(upstream, tokens, [(1, 2, 2)]) == upstream).all()  # no markers held


def test_the_video_placeholder_embeds_its_video_tokens_only() -> None:
    tokens = [AUDIO_BOS, V, V, A, V, A, AUDIO_EOS]
    video = Placeholder("video", 0, 3, tokens, torch.tensor([token != A for token in tokens]))  # upstream's
    audio = Placeholder("audio", 0, 3, tokens, torch.tensor([token == A for token in tokens]))
    fixed = video_tokens_only({"video": [video], "audio": [audio]}, V)
    assert fixed["video"][0].is_embed.tolist() == [False, True, True, False, True, False, False]
    assert fixed["audio"] == [audio]
