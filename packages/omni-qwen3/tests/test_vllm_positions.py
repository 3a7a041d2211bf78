"""The position correction omni_qwen3's vLLM plugin applies after each video-with-soundtrack block."""

from __future__ import annotations

import numpy as np

from omni_model_kit.vllm_positions import trailing_run
from omni_qwen3.vllm_positions import move_block_ends

V, A, START, END, TEXT = 5, 7, 1, 2, 9


def test_trailing_run() -> None:
    assert trailing_run([V, V, A, A, A]) == 3 and trailing_run([A, V]) == 1 and trailing_run([A, A]) == 2


def test_tokens_after_a_block_that_ends_with_short_audio_move_back() -> None:
    # text(0) <audio_start>(1) block: V at (2,2..4) x3, A at 2,3 ; <audio_end> text text
    tokens = [TEXT, START, V, V, V, A, A, END, TEXT, TEXT]
    block = np.array([[2, 2, 2, 2, 3], [2, 3, 4, 2, 3], [2, 3, 4, 2, 3]])
    after = 5 + np.arange(3)  # vLLM: one past the whole block's largest (4)
    positions = np.concatenate([[[0] * 3, [1] * 3], block.T, np.stack([after] * 3, axis=1)]).T
    fixed = move_block_ends(positions, tokens, [(1, 5, 7)])
    assert fixed[:, :7].tolist() == positions[:, :7].tolist()  # up to the block's end, unchanged
    assert fixed[:, 7:].tolist() == [[4, 5, 6]] * 3  # one past the audio run's largest (3)
    assert positions[:, 7].tolist() == [5, 5, 5]  # the input is left as it was


def test_a_block_that_ends_with_its_largest_position_is_left_alone() -> None:
    tokens = [START, A, V, V, END, TEXT]
    positions = np.array([[0, 1, 1, 1, 3, 4], [0, 1, 1, 2, 3, 4], [0, 1, 1, 2, 3, 4]])
    assert (move_block_ends(positions, tokens, [(0, 3, 5)]) == positions).all()


def test_two_blocks_are_corrected_in_turn() -> None:
    tokens = [START, V, V, A, END, START, V, V, A, END]
    one = [[0, 1, 1, 1, 3], [0, 1, 2, 1, 3], [0, 1, 2, 1, 3]]  # block max 2, audio run max 1: +1 off
    two = [[4, 5, 5, 5, 7], [4, 5, 6, 5, 7], [4, 5, 6, 5, 7]]
    positions = np.concatenate([np.array(one), np.array(two)], axis=1)
    fixed = move_block_ends(positions, tokens, [(0, 3, 5), (5, 3, 5)])
    assert fixed[0].tolist() == [0, 1, 1, 1, 2, 3, 4, 4, 4, 5]
    assert fixed[1].tolist() == [0, 1, 2, 1, 2, 3, 4, 5, 4, 5]
