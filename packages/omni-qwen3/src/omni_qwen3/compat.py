"""Every private transformers name omni_qwen3 relies on, in one place.

- ``audio_output_lengths``: transformers' ``_get_feat_extract_output_lengths`` of the
  Qwen3-Omni modeling module, the audio encoder's output length per input mel length (its
  convolutions' arithmetic, with no public accessor). The canary in
  ``packages/omni-qwen3/tests/test_compat.py`` fails when upstream moves or changes it.
"""

from __future__ import annotations

import torch


def audio_output_lengths(mel_lengths: torch.Tensor) -> torch.Tensor:
    """The Qwen3-Omni audio encoder's output frames for each input length of mel frames."""
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import _get_feat_extract_output_lengths

    lengths: torch.Tensor = _get_feat_extract_output_lengths(mel_lengths)
    return lengths
