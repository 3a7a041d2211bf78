"""Engine-neutral description of a model's generation pipeline.

A pipeline is a chain (or DAG) of stages, each run by an engine: for Qwen3-Omni the
thinker (text), the talker (codec tokens) and code2wav (waveform). The rollout adapter
describes it with these frozen objects; the local engine and the vLLM-Omni backend each
translate them into their own configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from omni_contracts.errors import SchemaError

OutputType = Literal["text", "latent", "codec", "audio"]
"""What a stage emits: text tokens, hidden states for a later stage, codec tokens, or a waveform."""

OUTPUT_TYPES: tuple[str, ...] = get_args(OutputType)


@dataclass(frozen=True)
class StageConfig:
    """One stage of a generation pipeline.

    Attributes:
        stage_id: position of the stage; stage ids of a pipeline are ``0..n-1``.
        model_arch: the architecture the engine instantiates for this stage
            (e.g. ``"Qwen3OmniMoeThinkerForConditionalGeneration"``).
        output_type: what the stage emits.
        final_output: whether the stage's output is returned to the caller.
        return_hidden_states: whether the stage hands hidden states to a later stage.
        inputs: ids of the stages whose outputs this stage consumes (earlier stages only).
    """

    stage_id: int
    model_arch: str
    output_type: OutputType
    final_output: bool = False
    return_hidden_states: bool = False
    inputs: tuple[int, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.stage_id < 0:
            raise SchemaError(f"Stage id must be >= 0, got {self.stage_id}.")
        if not self.model_arch:
            raise SchemaError(f"Stage {self.stage_id}: model_arch must name an architecture.")
        if self.output_type not in OUTPUT_TYPES:
            raise SchemaError(
                f"Stage {self.stage_id}: unknown output_type {self.output_type!r}; "
                f"valid: {', '.join(OUTPUT_TYPES)}."
            )
        if not isinstance(self.inputs, tuple):
            object.__setattr__(self, "inputs", tuple(self.inputs))
        for upstream in self.inputs:
            if upstream >= self.stage_id or upstream < 0:
                raise SchemaError(
                    f"Stage {self.stage_id} takes input from stage {upstream}: a stage can "
                    "only consume the output of an earlier stage."
                )


def validate_stage_topology(stages: Sequence[StageConfig]) -> tuple[StageConfig, ...]:
    """Check that ``stages`` form a well-formed pipeline and return them as a tuple.

    Rules: at least one stage; ids are ``0..n-1`` in order; at least one stage is a final
    output. (Each stage already checked that its ``inputs`` are earlier stages.)

    Raises:
        SchemaError: naming the first rule broken and the stage ids involved.
    """
    stages = tuple(stages)
    if not stages:
        raise SchemaError("A pipeline needs at least one stage; got an empty list.")
    ids = [stage.stage_id for stage in stages]
    if ids != list(range(len(stages))):
        raise SchemaError(f"Stage ids must be 0..{len(stages) - 1} in order; got {ids}.")
    if not any(stage.final_output for stage in stages):
        raise SchemaError(f"No stage is marked final_output among stages {ids}.")
    return stages
