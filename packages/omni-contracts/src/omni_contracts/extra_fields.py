"""Model-native data carried from rollout to the actor.

When the policy's token sequence alone cannot reconstruct what was sampled (a talker's
codebook trajectory, a conditioning signal), the rollout adapter stores that data in the
sample's ``extra_fields`` under a namespaced key ``"<model>.<name>"``. Batching moves each
namespaced key to the top level of the micro-batch under the same key, where the training
adapter's ``prepare_model_inputs`` reads it.

Shapes are declared per sample with symbolic dimensions: an ``int`` is a fixed size, a
``str`` is a symbol that must take the same value everywhere it appears in one sample.
The symbols ``prompt_length`` and ``response_length`` are bound from the sample itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from omni_contracts.errors import ExtraFieldError, SchemaError

Dim = int | str
NAMESPACED_KEY = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")


def is_namespaced(key: str) -> bool:
    """Whether ``key`` has the ``"<model>.<name>"`` form of a model-native field."""
    return NAMESPACED_KEY.fullmatch(key) is not None


@dataclass(frozen=True)
class ExtraFieldSpec:
    """Declares one model-native field of a rollout sample.

    Attributes:
        key: namespaced key, e.g. ``"qwen3_omni.codec_ids"``.
        shape: per-sample shape; ints are fixed, strings are symbols (see module doc).
        required: a required field missing from a sample is an error.
        forward_arg: if set, ``prepare_model_inputs`` passes the batched field to the
            model's forward under this keyword.
        description: what the field holds, for error messages and docs.
    """

    key: str
    shape: tuple[Dim, ...]
    required: bool = True
    forward_arg: str | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not is_namespaced(self.key):
            raise SchemaError(
                f"Extra-field key {self.key!r} is not namespaced: use '<model>.<name>' in "
                "lower case (e.g. 'qwen3_omni.codec_ids') so fields of different models "
                "cannot collide."
            )
        if not isinstance(self.shape, tuple):
            object.__setattr__(self, "shape", tuple(self.shape))
        for dim in self.shape:
            if isinstance(dim, bool) or not isinstance(dim, int | str) or dim == "":
                raise SchemaError(
                    f"Extra field {self.key!r}: dimension {dim!r} must be an int size or a "
                    "symbol name."
                )
            if isinstance(dim, int) and dim < 0:
                raise SchemaError(f"Extra field {self.key!r}: dimension {dim} is negative.")


def shape_of(value: object) -> tuple[int, ...]:
    """The shape of a tensor/array (``.shape``), a rectangular nested list, or a scalar.

    Raises:
        ExtraFieldError: a nested list is ragged.
    """
    shape = getattr(value, "shape", None)
    if shape is not None:
        return tuple(int(dim) for dim in shape)
    if isinstance(value, list | tuple):
        if not value:
            return (0,)
        inner = [shape_of(item) for item in value]
        if any(item != inner[0] for item in inner):
            raise ExtraFieldError(
                f"Ragged nested sequence: element shapes {sorted(set(inner))} differ."
            )
        return (len(value), *inner[0])
    return ()


def _format_shape(shape: Sequence[Dim]) -> str:
    return "(" + ", ".join(str(dim) for dim in shape) + ")"


def validate_extra_fields(
    extra_fields: Mapping[str, object],
    specs: Mapping[str, ExtraFieldSpec],
    *,
    bindings: Mapping[str, int] | None = None,
    where: str = "sample",
) -> dict[str, int]:
    """Check one sample's namespaced extra fields against the declared specs.

    Non-namespaced keys (engine bookkeeping) are ignored. Returns the symbol bindings.

    Args:
        extra_fields: the sample's ``extra_fields``.
        specs: declared fields by key.
        bindings: symbols already known (``response_length`` etc.).
        where: names the sample in messages (e.g. ``"sample 3"``).

    Raises:
        ExtraFieldError: a required field is missing, a namespaced field is undeclared, or
            a shape does not match. The message names the sample, the key, and the expected
            and actual shapes.
    """
    bound = dict(bindings or {})
    for key in sorted(extra_fields):
        if is_namespaced(key) and key not in specs:
            declared = ", ".join(sorted(specs)) or "none"
            raise ExtraFieldError(
                f"{where}: extra field {key!r} is not declared by the training adapter "
                f"(declared: {declared}). Declare an ExtraFieldSpec for it, or fix the key."
            )
    for key, spec in specs.items():
        if key not in extra_fields or extra_fields[key] is None:
            if spec.required:
                present = ", ".join(sorted(extra_fields)) or "none"
                raise ExtraFieldError(
                    f"{where}: required extra field {key!r} is missing (present: {present}). "
                    "The rollout adapter's postprocess_agent_loop_output must store it."
                )
            continue
        actual = shape_of(extra_fields[key])
        _match_shape(spec, actual, bound, where)
    return bound


def _match_shape(spec: ExtraFieldSpec, actual: tuple[int, ...], bound: dict[str, int], where: str) -> None:
    expected = _format_shape(spec.shape)
    if len(actual) != len(spec.shape):
        raise ExtraFieldError(
            f"{where}: extra field {spec.key!r} has shape {_format_shape(actual)}, expected "
            f"{expected} ({len(spec.shape)} dims, got {len(actual)})."
        )
    for axis, (dim, size) in enumerate(zip(spec.shape, actual, strict=True)):
        if isinstance(dim, int):
            if size != dim:
                raise ExtraFieldError(
                    f"{where}: extra field {spec.key!r} has shape {_format_shape(actual)}, "
                    f"expected {expected}: axis {axis} must be {dim}, got {size}."
                )
        elif dim in bound and bound[dim] != size:
            raise ExtraFieldError(
                f"{where}: extra field {spec.key!r} has shape {_format_shape(actual)}, "
                f"expected {expected}: axis {axis} is {dim!r} = {bound[dim]} elsewhere in "
                f"this sample, got {size}."
            )
        else:
            bound[dim] = size
