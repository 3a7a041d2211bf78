"""The rollout sample: what an agent loop hands to training, engine-neutral."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from omni_contracts.errors import SchemaError
from omni_contracts.extra_fields import ExtraFieldSpec, validate_extra_fields


@dataclass(frozen=True)
class RolloutSample:
    """One sampled trajectory.

    ``response_ids`` is the policy's sampled sequence; ``response_mask`` marks which of its
    tokens the policy generated (1) versus tokens inserted by the environment or a tool (0);
    ``response_logprobs``, when the engine returns them, are the sampling log-probs of the
    same tokens. All three are aligned one-to-one. Model-native data lives in
    ``extra_fields`` under namespaced keys (see :mod:`omni_contracts.extra_fields`).
    """

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    response_mask: tuple[int, ...]
    response_logprobs: tuple[float, ...] | None = None
    extra_fields: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("prompt_ids", "response_ids", "response_mask"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if self.response_logprobs is not None and not isinstance(self.response_logprobs, tuple):
            object.__setattr__(self, "response_logprobs", tuple(self.response_logprobs))
        n = len(self.response_ids)
        if len(self.response_mask) != n:
            raise SchemaError(
                f"response_mask has {len(self.response_mask)} entries for {n} response_ids; "
                "they must align one-to-one."
            )
        if self.response_logprobs is not None and len(self.response_logprobs) != n:
            raise SchemaError(
                f"response_logprobs has {len(self.response_logprobs)} entries for {n} "
                "response_ids; they must align one-to-one (or be None)."
            )
        bad = sorted({m for m in self.response_mask if m not in (0, 1)})
        if bad:
            raise SchemaError(f"response_mask may only hold 0 and 1; found {bad}.")

    def misaligned_fields(self) -> dict[str, int]:
        """Lengths of ``response_mask``/``response_logprobs`` that differ from
        ``len(response_ids)``; empty when aligned. (Construction checks this, but an object
        mutated afterwards, e.g. through ``object.__setattr__``, is checked again here.)"""
        sizes = {"response_mask": len(self.response_mask)}
        if self.response_logprobs is not None:
            sizes["response_logprobs"] = len(self.response_logprobs)
        return {name: size for name, size in sizes.items() if size != len(self.response_ids)}

    def validate_extra_fields(
        self, specs: Mapping[str, ExtraFieldSpec], *, where: str = "sample"
    ) -> None:
        """Check ``extra_fields`` against ``specs``, binding the length symbols."""
        validate_extra_fields(
            self.extra_fields,
            specs,
            bindings={
                "prompt_length": len(self.prompt_ids),
                "response_length": len(self.response_ids),
            },
            where=where,
        )


def collate_extra_fields(
    samples: Sequence[RolloutSample], specs: Mapping[str, ExtraFieldSpec]
) -> dict[str, list[object | None]]:
    """The batching rule: namespaced extra fields move to the top of the micro-batch.

    Each declared key present in any sample becomes ``batch[key] = [value per sample]``,
    in sample order, with ``None`` where an optional field is absent. Keys that are not
    namespaced stay with the engine. Every sample is validated first.

    Raises:
        ExtraFieldError: naming the sample index, the key and the shapes involved.
    """
    for index, sample in enumerate(samples):
        sample.validate_extra_fields(specs, where=f"sample {index}")
    return {
        key: [sample.extra_fields.get(key) for sample in samples]
        for key in specs
        if any(key in sample.extra_fields for sample in samples)
    }


@dataclass(frozen=True)
class StageOutput:
    """What one pipeline stage returned for one request, engine-neutral.

    An aborted request has ``aborted=True`` and usually empty ``token_ids``.
    ``data`` carries non-token outputs (hidden states, a waveform) by name.
    """

    stage_id: int
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] | None = None
    finished: bool = True
    aborted: bool = False
    data: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.token_ids, tuple):
            object.__setattr__(self, "token_ids", tuple(self.token_ids))
        if self.logprobs is not None:
            if not isinstance(self.logprobs, tuple):
                object.__setattr__(self, "logprobs", tuple(self.logprobs))
            if len(self.logprobs) != len(self.token_ids):
                raise SchemaError(
                    f"Stage {self.stage_id} output has {len(self.logprobs)} logprobs for "
                    f"{len(self.token_ids)} token ids; they must align one-to-one."
                )
