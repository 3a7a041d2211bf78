"""The CPU rollout's pieces (``verl_engine.local_rollout``) against verl's own code.

The whole backend runs in ``test_verl_cpu_run.py``; these pin the parts a run would only
show as wrong numbers: the sampling options, the expert weights verl streams, the media cache.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed --extra gpu)")

pytestmark = pytest.mark.slow


def test_sampling_options_that_change_the_distribution_are_refused_by_name() -> None:
    from omni_trainer.verl_engine.local_rollout import sampling_settings

    settings = sampling_settings({"temperature": 0.7, "top_p": 0.9, "top_k": 0, "repetition_penalty": 1.0}, 5)
    assert (settings.temperature, settings.top_p, settings.top_k, settings.max_new_tokens, settings.n) == (0.7, 0.9, -1, 5, 1)
    with pytest.raises(ValueError, match="repetition_penalty=1.0 only"):
        sampling_settings({"repetition_penalty": 1.1}, 5)
    with pytest.raises(ValueError, match="ignore_eos"):
        sampling_settings({"ignore_eos": True}, 5)


def test_experts_verl_streams_unfused_are_packed_back_exactly() -> None:
    import torch
    from verl.workers.engine.fsdp.utils import unfuse_moe_params

    from omni_trainer.verl_engine.local_rollout import pack_experts

    gen = torch.Generator().manual_seed(0)
    packed = {
        "thinker.model.layers.0.mlp.experts.gate_up_proj": torch.randn(4, 6, 5, generator=gen),  # [E, 2I, H]
        "thinker.model.layers.0.mlp.experts.down_proj": torch.randn(4, 5, 3, generator=gen),  # [E, H, I]
        "thinker.model.layers.0.self_attn.q_proj.weight": torch.randn(5, 5, generator=gen),
    }
    streamed = dict(unfuse_moe_params(packed.items(), "qwen3_omni_moe"))
    assert len(streamed) == 1 + 4 * 3  # verl sends vLLM's per-expert keys
    repacked = pack_experts(streamed)
    assert repacked.keys() == packed.keys()
    assert all(torch.equal(repacked[name], packed[name]) for name in packed)
    streamed.pop("thinker.model.layers.0.mlp.experts.2.up_proj.weight")
    with pytest.raises(ValueError, match="incomplete expert weights"):
        pack_experts(streamed)


def test_the_media_cache_keys_on_values_not_objects() -> None:
    from PIL import Image

    from omni_trainer.verl_engine.local_rollout import media_key

    tone = np.sin(np.arange(800, dtype=np.float32))
    picture = Image.new("RGB", (8, 8), (10, 20, 30))
    key = media_key([1, 2, 3], [picture], None, [tone.copy()], None)
    assert key == media_key([1, 2, 3], [picture.copy()], None, [tone.copy()], None)
    assert key != media_key([1, 2, 3], [Image.new("RGB", (8, 8), (10, 20, 31))], None, [tone], None)
    assert key != media_key([1, 2, 4], [picture], None, [tone], None)
    assert key != media_key([1, 2, 3], [picture], None, [tone * 2], None)
