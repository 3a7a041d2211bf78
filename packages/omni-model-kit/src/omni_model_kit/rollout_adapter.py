"""The rollout adapter of an Omni checkpoint whose pipeline is thinker -> talker -> vocoder.

The modes, each a vLLM-Omni pipeline: ``thinker_only`` (stage 0, text; what RL on the
thinker uses), ``thinker_talker`` (stages 0-1, codec tokens out; the thinker hands hidden
states to the talker), ``full`` (stages 0-2, a waveform out) and ``talker`` (stages 0-2
with the talker final too, for a package whose talker is the trained policy). A model
package subclasses :class:`OmniRolloutAdapter` with the modes it offers, their pipeline ids
and its stage architectures. The topology is written here, so the local engine never imports
vLLM-Omni; :func:`translate_pipeline` reads vLLM-Omni's own for a gpu-extra test to compare.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from omni_contracts import RolloutAdapter, StageConfig, StageOutput

STAGE_OUTPUTS = {"thinker": "text", "talker": "codec", "code2wav": "audio"}
"""What each of vLLM-Omni's model stages emits."""

TALKER_MODE = "talker"


def keep_final_outputs(
    outputs: Sequence[StageOutput], stages: Sequence[StageConfig]
) -> tuple[StageOutput, ...]:
    """The outputs of every stage marked ``final_output``, in stage order.

    Aborted outputs are kept (the caller sees they were aborted); an empty list gives ``()``.
    """
    final_ids = {stage.stage_id for stage in stages if stage.final_output}
    kept = [output for output in outputs if output.stage_id in final_ids]
    return tuple(sorted(kept, key=lambda output: output.stage_id))


def omni_stage_configs(arches: Mapping[str, str], mode: str) -> tuple[StageConfig, ...]:
    """The topology of ``mode``; ``arches`` maps ``thinker``, ``talker`` and ``code2wav`` to
    the architecture each stage instantiates."""
    if mode == "thinker_only":
        return (StageConfig(0, arches["thinker"], "text", final_output=True),)
    thinker = StageConfig(0, arches["thinker"], "text", final_output=True, return_hidden_states=True)
    if mode == "thinker_talker":
        return (thinker, StageConfig(1, arches["talker"], "codec", final_output=True, inputs=(0,)))
    return (
        thinker,
        StageConfig(1, arches["talker"], "codec", final_output=mode == TALKER_MODE, inputs=(0,)),
        StageConfig(2, arches["code2wav"], "audio", final_output=True, inputs=(1,)),
    )


def translate_pipeline(pipeline: Any, arches: Mapping[str, str]) -> tuple[StageConfig, ...]:
    """A vLLM-Omni pipeline definition as ``StageConfig``s (a thinker returns hidden states
    when a later stage consumes it)."""
    stages = list(pipeline.stages)
    consumed = {i for stage in stages for i in stage.input_sources}
    return tuple(
        StageConfig(
            stage_id=stage.stage_id,
            model_arch=arches[stage.model_stage],
            output_type=STAGE_OUTPUTS[stage.model_stage],  # type: ignore[arg-type]
            final_output=bool(stage.final_output),
            return_hidden_states=stage.model_stage == "thinker" and stage.stage_id in consumed,
            inputs=tuple(stage.input_sources),
        )
        for stage in stages
    )


def vllm_omni_installed() -> bool:
    return importlib.util.find_spec("vllm_omni") is not None


class OmniRolloutAdapter(RolloutAdapter):
    """A thinker -> talker -> vocoder pipeline; the thinker (stage 0) is the trained policy
    (not registered itself: subclass it, set ``modes`` and the attributes below)."""

    stage_arches: ClassVar[Mapping[str, str]]
    """The architecture of each stage: ``thinker``, ``talker``, ``code2wav``."""

    pipeline_ids: ClassVar[Mapping[str, str]]
    """vLLM-Omni's pipeline name for each mode."""

    deploy_file: ClassVar[str]
    """vLLM-Omni's production deploy file of the model, for every mode but ``thinker_only``."""

    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        self.check_mode(mode)
        return omni_stage_configs(self.stage_arches, mode)

    def rollout_flags(self, mode: str) -> dict[int, dict[str, object]]:
        self.check_mode(mode)
        return {} if mode == "thinker_only" else {0: {"return_hidden_states": True}}

    def get_pipeline_id(self, mode: str) -> str:
        self.check_mode(mode)
        return self.pipeline_ids[mode]

    def upstream_deploy_file(self, mode: str) -> str | None:
        """vLLM-Omni's production deploy of this model: its talker (and vocoder) sampling
        defaults; without them the talker would stop after vLLM's default 16 tokens."""
        self.check_mode(mode)
        return None if mode == "thinker_only" else self.deploy_file

    def get_engine_hf_overrides(self, mode: str) -> dict[str, Any]:
        self.check_mode(mode)
        # Thinker-only: no talker or vocoder weights are loaded, no audio is produced.
        return {"enable_audio_output": False} if mode == "thinker_only" else {}


__all__ = ["OmniRolloutAdapter", "STAGE_OUTPUTS", "omni_stage_configs", "translate_pipeline", "vllm_omni_installed"]
