"""Helpers a model package's rollout adapter builds on (``omni_model_kit.rollout_adapter``)."""

from __future__ import annotations

from omni_contracts import StageConfig, StageOutput
from omni_model_kit.rollout_adapter import keep_final_outputs


def test_keep_final_outputs_orders_by_stage_and_keeps_aborts() -> None:
    stages = [
        StageConfig(0, "T", "text", final_output=True),
        StageConfig(1, "K", "codec", inputs=(0,)),
        StageConfig(2, "W", "audio", final_output=True, inputs=(1,)),
    ]
    wave = StageOutput(2, aborted=True, finished=False)
    text = StageOutput(0, (1, 2))
    codec = StageOutput(1, (3,))
    assert keep_final_outputs([wave, codec, text], stages) == (text, wave)
    assert keep_final_outputs([], stages) == ()
