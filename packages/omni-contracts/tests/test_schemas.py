from __future__ import annotations

import pytest

from omni_contracts import (
    ExtraFieldError,
    ExtraFieldSpec,
    RolloutSample,
    SchemaError,
    StageConfig,
    StageOutput,
    collate_extra_fields,
    is_namespaced,
    validate_extra_fields,
    validate_stage_topology,
)
from omni_contracts.extra_fields import shape_of

CODES = ExtraFieldSpec("talky.codes", ("response_length", 4))
CONDITION = ExtraFieldSpec("talky.condition", ("C",), required=False)
CONDITION_COPY = ExtraFieldSpec("talky.condition_copy", ("C",), required=False)
SPECS = {spec.key: spec for spec in (CODES, CONDITION, CONDITION_COPY)}


def sample(n: int = 3, **extra: object) -> RolloutSample:
    return RolloutSample(
        prompt_ids=[5, 6],
        response_ids=list(range(n)),
        response_mask=[1] * n,
        response_logprobs=[-0.5] * n,
        extra_fields=extra,
    )


# --- stage topology -------------------------------------------------------------------


def test_stage_config_rejects_unknown_output_type() -> None:
    with pytest.raises(SchemaError, match="unknown output_type 'video'; valid: text, latent, codec, audio"):
        StageConfig(0, "Arch", "video")  # type: ignore[arg-type]


def test_stage_config_rejects_input_from_a_later_stage() -> None:
    with pytest.raises(SchemaError, match="Stage 1 takes input from stage 2"):
        StageConfig(1, "Arch", "codec", inputs=(2,))


def test_stage_config_is_frozen_and_normalises_inputs() -> None:
    stage = StageConfig(2, "Arch", "audio", inputs=[0, 1])  # type: ignore[arg-type]
    assert stage.inputs == (0, 1)
    with pytest.raises(AttributeError):
        stage.stage_id = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ([], "at least one stage"),
        ([StageConfig(1, "A", "text", final_output=True)], r"0\.\.0 in order; got \[1\]"),
        ([StageConfig(0, "A", "text")], r"No stage is marked final_output among stages \[0\]"),
    ],
)
def test_topology_errors(stages: list[StageConfig], message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        validate_stage_topology(stages)


# --- rollout sample ---------------------------------------------------------------------


def test_sample_requires_aligned_mask_and_logprobs() -> None:
    with pytest.raises(SchemaError, match="response_mask has 2 entries for 3 response_ids"):
        RolloutSample((1,), (1, 2, 3), (1, 1))
    with pytest.raises(SchemaError, match="response_logprobs has 1 entries for 2 response_ids"):
        RolloutSample((1,), (1, 2), (1, 1), (-0.1,))
    with pytest.raises(SchemaError, match=r"only hold 0 and 1; found \[2\]"):
        RolloutSample((1,), (1, 2), (1, 2))


def test_sample_converts_sequences_to_tuples() -> None:
    made = sample(2)
    assert made.response_ids == (0, 1) and made.response_logprobs == (-0.5, -0.5)


def test_stage_output_logprobs_align() -> None:
    with pytest.raises(SchemaError, match="Stage 1 output has 1 logprobs for 2 token ids"):
        StageOutput(1, token_ids=[4, 5], logprobs=[-1.0])


# --- extra fields -------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["codes", "Talky.codes", "talky.", ".codes", "talky codes"])
def test_spec_key_must_be_namespaced(key: str) -> None:
    assert not is_namespaced(key)
    with pytest.raises(SchemaError, match=f"{key!r} is not namespaced: use '<model>.<name>'"):
        ExtraFieldSpec(key, (1,))


def test_spec_dimensions_are_checked() -> None:
    with pytest.raises(SchemaError, match=r"dimension -1 is negative"):
        ExtraFieldSpec("a.b", (-1,))
    with pytest.raises(SchemaError, match=r"dimension 1.5 must be an int size or a symbol"):
        ExtraFieldSpec("a.b", (1.5,))  # type: ignore[arg-type]


def test_shape_of_tensors_lists_and_scalars() -> None:
    torch = pytest.importorskip("torch")
    assert shape_of(torch.zeros(2, 3)) == (2, 3)
    assert shape_of([[1, 2], [3, 4], [5, 6]]) == (3, 2)
    assert shape_of([]) == (0,)
    assert shape_of(7) == ()
    with pytest.raises(ExtraFieldError, match=r"Ragged nested sequence"):
        shape_of([[1, 2], [3]])


def test_valid_fields_bind_symbols() -> None:
    made = sample(3, **{"talky.codes": [[0] * 4] * 3, "talky.condition": [1, 2]})
    made.validate_extra_fields(SPECS)
    bound = validate_extra_fields(made.extra_fields, SPECS, bindings={"response_length": 3})
    assert bound == {"response_length": 3, "C": 2}


def test_missing_required_field_names_sample_and_key() -> None:
    made = sample(3, **{"talky.condition": [1]})
    with pytest.raises(ExtraFieldError) as info:
        made.validate_extra_fields(SPECS, where="sample 7")
    assert str(info.value).startswith("sample 7: required extra field 'talky.codes' is missing")
    assert "present: talky.condition" in str(info.value)


def test_undeclared_namespaced_field_is_an_error_but_engine_keys_are_not() -> None:
    made = sample(2, **{"talky.codes": [[0] * 4] * 2, "turn_scores": [1.0]})
    made.validate_extra_fields(SPECS)  # "turn_scores" is engine bookkeeping
    typo = sample(2, **{"talky.codes": [[0] * 4] * 2, "talky.cond": [1]})
    with pytest.raises(ExtraFieldError, match="'talky.cond' is not declared by the training adapter"):
        typo.validate_extra_fields(SPECS)


def test_wrong_fixed_dimension_reports_expected_and_actual() -> None:
    made = sample(2, **{"talky.codes": [[0] * 5] * 2})
    with pytest.raises(ExtraFieldError) as info:
        made.validate_extra_fields(SPECS, where="sample 0")
    assert str(info.value) == (
        "sample 0: extra field 'talky.codes' has shape (2, 5), expected "
        "(response_length, 4): axis 1 must be 4, got 5."
    )


def test_response_length_symbol_is_bound_from_the_sample() -> None:
    made = sample(3, **{"talky.codes": [[0] * 4] * 2})
    with pytest.raises(ExtraFieldError, match=r"axis 0 is 'response_length' = 3 elsewhere"):
        made.validate_extra_fields(SPECS)


def test_symbol_must_agree_across_fields() -> None:
    made = sample(
        2, **{"talky.codes": [[0] * 4] * 2, "talky.condition": [1, 2], "talky.condition_copy": [1]}
    )
    with pytest.raises(ExtraFieldError, match=r"'talky.condition_copy' has shape \(1\).*'C' = 2"):
        made.validate_extra_fields(SPECS)


def test_wrong_rank_is_reported() -> None:
    made = sample(2, **{"talky.codes": [0, 0]})
    with pytest.raises(ExtraFieldError, match=r"\(2 dims, got 1\)"):
        made.validate_extra_fields(SPECS)


def test_collate_moves_namespaced_keys_to_the_top_level() -> None:
    first = sample(2, **{"talky.codes": [[1] * 4] * 2, "talky.condition": [9], "turn_scores": [1.0]})
    second = sample(1, **{"talky.codes": [[2] * 4]})
    batch = collate_extra_fields([first, second], SPECS)
    assert batch == {
        "talky.codes": [[[1] * 4] * 2, [[2] * 4]],
        "talky.condition": [[9], None],  # optional and absent in the second sample
    }  # "turn_scores" is not namespaced and stays with the engine


def test_collate_names_the_bad_sample() -> None:
    good = sample(1, **{"talky.codes": [[1] * 4]})
    with pytest.raises(ExtraFieldError, match=r"^sample 1: required extra field 'talky.codes'"):
        collate_extra_fields([good, sample(1)], SPECS)
