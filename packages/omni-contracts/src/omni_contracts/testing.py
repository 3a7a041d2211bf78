"""The contract test kit: a model package proves its adapters obey the contract.

Call these from the model package's own pytest, e.g.::

    from omni_contracts import testing

    def test_rollout_contract():
        testing.check_rollout_modes(MyRolloutAdapter())

Each check raises :class:`~omni_contracts.errors.ContractViolation` (an ``AssertionError``)
naming the adapter, what is wrong, and how to fix it. Nothing here imports torch: models are
inspected through ``named_children``/``modules``/``_no_split_modules`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from omni_contracts.errors import ContractViolation, OmniContractError, UnknownModeError
from omni_contracts.extra_fields import ExtraFieldSpec, is_namespaced
from omni_contracts.rollout_adapter import RolloutAdapter, rollout_adapters
from omni_contracts.sample import RolloutSample, StageOutput
from omni_contracts.thinker_processor import missing_processor_members
from omni_contracts.topology import StageConfig, validate_stage_topology
from omni_contracts.training_adapter import TrainingAdapter, training_adapters

_NO_SUCH_MODE = "__no_such_mode__"


def _fail(adapter: object, message: str) -> ContractViolation:
    return ContractViolation(f"{type(adapter).__name__}: {message}")


def check_training_registration(
    adapter_cls: type[TrainingAdapter], architecture: str, stage: str
) -> None:
    """``(architecture, stage)`` resolves to ``adapter_cls`` (loading entry points if needed)."""
    found = training_adapters.get((architecture, stage))
    if found is not adapter_cls:
        raise ContractViolation(
            f"({architecture!r}, {stage!r}) resolves to {found.__qualname__}, not "
            f"{adapter_cls.__qualname__}. Register it with "
            f"@TrainingAdapter.register({architecture!r}, stage={stage!r})."
        )


def check_rollout_registration(adapter_cls: type[RolloutAdapter], pipeline: str) -> None:
    """``pipeline`` resolves to ``adapter_cls`` (loading entry points if needed)."""
    found = rollout_adapters.get(pipeline)
    if found is not adapter_cls:
        raise ContractViolation(
            f"Pipeline {pipeline!r} resolves to {found.__qualname__}, not "
            f"{adapter_cls.__qualname__}. Register it with @RolloutAdapter.register({pipeline!r})."
        )


def _resolve(module: Any, path: str) -> Any:
    owner = module
    for part in path.split("."):
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    return owner


def check_strip_modules(adapter: TrainingAdapter, model: Any, model_config: Any) -> None:
    """Every path from ``get_strip_modules`` exists on ``model`` and is gone after
    ``configure_model`` (which mutates ``model``)."""
    paths = list(adapter.get_strip_modules(model_config))
    missing = [path for path in paths if _resolve(model, path) is None]
    if missing:
        raise _fail(
            adapter,
            f"get_strip_modules names {missing}, which do not exist on "
            f"{type(model).__name__}. Name only submodules the loaded model has.",
        )
    adapter.configure_model(model, model_config)
    remaining = [path for path in paths if _resolve(model, path) is not None]
    if remaining:
        raise _fail(
            adapter,
            f"{remaining} still exist after configure_model. An override of "
            "configure_model must call super().configure_model(module, model_config) first.",
        )


def check_no_split_modules(model: Any) -> None:
    """``model._no_split_modules`` names classes that occur among the model's submodules.

    FSDP wraps each instance of these classes separately; a name that matches nothing makes
    the whole model one unit and defeats sharding.
    """
    names = getattr(model, "_no_split_modules", None)
    if not names or isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ContractViolation(
            f"{type(model).__name__}._no_split_modules is {names!r}; set it in configure_model "
            "to a list of decoder-layer class names."
        )
    modules = getattr(model, "modules", None)
    present = {type(sub).__name__ for sub in modules()} if callable(modules) else set()
    absent = sorted(set(names) - present)
    if absent:
        layers = sorted(name for name in present if "Layer" in name or "Block" in name)
        raise ContractViolation(
            f"{type(model).__name__}._no_split_modules names {absent}, which no submodule is "
            f"an instance of. Layer-like classes present: {layers or 'none'}."
        )


def check_no_rebound_methods(model: Any) -> None:
    """No module of ``model`` carries a callable in its instance ``__dict__`` that shadows a
    class attribute (``module.forward = other.forward``, the pattern the contract forbids).

    A policy whose forward differs from the checkpoint class's is a class of its own,
    returned by ``TrainingAdapter.policy_class``.
    """
    modules = getattr(model, "modules", None)
    rebound = [
        f"{type(sub).__name__}.{name}"
        for sub in (modules() if callable(modules) else [model])
        for name, value in vars(sub).items()
        if callable(value) and not isinstance(value, type) and hasattr(type(sub), name)
    ]
    if rebound:
        raise ContractViolation(
            f"{sorted(set(rebound))} are re-bound on loaded instances. Define the methods on a "
            "class and return it from TrainingAdapter.policy_class instead."
        )


def check_thinker_policy(policy: Any, full_model: Any) -> None:
    """A thinker policy (``omni_model_kit.thinker_policy.ThinkerPolicyMixin``) built
    from a checkpoint holds only ``thinker``, under the checkpoint's parameter names and with
    its values (so weights load by name and sync to a rollout engine unchanged), and its
    embedding accessors are the thinker's. ``full_model`` is the checkpoint's own class
    loaded from the same path."""
    children = [name for name, _ in policy.named_children()]
    if children != ["thinker"]:
        raise _fail(policy, f"the policy builds {children}; a thinker policy builds ['thinker'] only.")
    expected = {f"thinker.{k}": v for k, v in full_model.thinker.state_dict().items()}
    loaded = policy.state_dict()
    if loaded.keys() != expected.keys():
        extra, missing = sorted(loaded.keys() - expected.keys()), sorted(expected.keys() - loaded.keys())
        raise _fail(policy, f"parameter names differ from the checkpoint's: extra {extra[:5]}, missing {missing[:5]}.")
    differing = [k for k in loaded if not bool((loaded[k] == expected[k]).all())]
    if differing:
        raise _fail(policy, f"{len(differing)} tensors differ from the checkpoint's, e.g. {differing[:3]}.")
    if policy.get_input_embeddings() is not policy.thinker.get_input_embeddings():
        raise _fail(policy, "get_input_embeddings() is not the thinker's.")
    if policy.get_output_embeddings() is not policy.thinker.get_output_embeddings():
        raise _fail(policy, "get_output_embeddings() is not the thinker's.")


def check_logits_to_keep(policy: Any, input_ids: Any, keep: int = 2) -> None:
    """``policy(input_ids=..., logits_to_keep=keep)`` returns the last ``keep`` positions'
    logits of the full forward (the actor asks for only the response's), and leaves the
    policy as it was: the next full forward has every position."""
    full = policy(input_ids=input_ids).logits
    kept = policy(input_ids=input_ids, logits_to_keep=keep).logits
    if tuple(kept.shape) != (*full.shape[:1], keep, *full.shape[2:]):
        raise _fail(policy, f"logits_to_keep={keep} gave logits of shape {tuple(kept.shape)} for {tuple(full.shape)}.")
    if not bool((kept - full[:, -keep:]).abs().max() <= 1e-5):
        raise _fail(policy, f"logits_to_keep={keep} gave logits that differ from the full forward's last positions.")
    again = policy(input_ids=input_ids).logits
    if tuple(again.shape) != tuple(full.shape):
        raise _fail(policy, f"after a logits_to_keep call a full forward gave {tuple(again.shape)}, not {tuple(full.shape)}.")


def check_processor(adapter: TrainingAdapter, model_path: str, model_config: Any) -> None:
    """For a model that takes media (``adapter.takes_media()``), ``configure_processor``
    returns an :class:`~omni_contracts.OmniProcessor`: every member the engines call by name
    exists, and ``pad_token_ids`` are distinct ints. A text-only model's processor (its
    tokenizer, say) need only template and encode prompts: ``apply_chat_template`` and a call
    with ``text=``."""
    processor = adapter.configure_processor(model_path, model_config)
    if not adapter.takes_media():
        if not callable(getattr(processor, "apply_chat_template", None)) or not callable(processor):
            raise _fail(
                adapter,
                f"configure_processor returned {type(processor).__name__}, which cannot template and encode "
                "prompts (it needs apply_chat_template and a call with text=); return the tokenizer.",
            )
        return
    missing = missing_processor_members(processor)
    if missing:
        raise _fail(
            adapter,
            f"configure_processor returned {type(processor).__name__}, which lacks {missing}. Mix in "
            "omni_model_kit.thinker_processor.ThinkerProcessorMixin and set its rope_indexer.",
        )
    pads = list(processor.pad_token_ids)
    if not pads or len(set(pads)) != len(pads) or not all(isinstance(p, int) for p in pads):
        raise _fail(adapter, f"pad_token_ids is {pads!r}; it must list the distinct media pad ids (ints).")


def _chat_template(obj: Any) -> Any:
    template = getattr(obj, "chat_template", None)
    if not template and hasattr(obj, "tokenizer"):
        template = getattr(obj.tokenizer, "chat_template", None)
    return template


def check_chat_templates(adapter: TrainingAdapter, model_path: str, model_config: Any) -> None:
    """The configured tokenizer and processor both expose a non-empty chat template."""
    for what, load in (
        ("configure_tokenizer", adapter.configure_tokenizer),
        ("configure_processor", adapter.configure_processor),
    ):
        loaded = load(model_path, model_config)
        if not _chat_template(loaded):
            raise _fail(
                adapter,
                f"{what}({model_path!r}) returned {type(loaded).__name__} without a chat "
                "template; the dataset applies it to every prompt. Load chat_template.json "
                "from the checkpoint if the tokenizer config lacks one.",
            )


def check_rollout_modes(adapter: RolloutAdapter) -> None:
    """Every mode gives a valid topology, flags that match it, a pipeline id, and policy
    and weight-sync stages that exist; an unknown mode raises naming the valid ones."""
    if not adapter.modes:
        raise _fail(adapter, "declares no modes; set the class attribute `modes`.")
    for mode in adapter.modes:
        stages = _stages(adapter, mode)
        if tuple(adapter.build_stage_configs(mode)) != stages:
            raise _fail(adapter, f"build_stage_configs({mode!r}) differs between two calls.")
        ids = {stage.stage_id for stage in stages}
        by_id = {stage.stage_id: stage for stage in stages}
        for stage_id, flags in adapter.rollout_flags(mode).items():
            if stage_id not in ids:
                raise _fail(
                    adapter,
                    f"rollout_flags({mode!r}) has flags for stage {stage_id}, but the "
                    f"pipeline's stages are {sorted(ids)}.",
                )
            wanted = flags.get("return_hidden_states")
            if wanted is not None and wanted != by_id[stage_id].return_hidden_states:
                raise _fail(
                    adapter,
                    f"mode {mode!r}: rollout_flags says return_hidden_states={wanted} for "
                    f"stage {stage_id}, its StageConfig says "
                    f"{by_id[stage_id].return_hidden_states}.",
                )
        pipeline_id = adapter.get_pipeline_id(mode)
        if not isinstance(pipeline_id, str) or not pipeline_id:
            raise _fail(adapter, f"get_pipeline_id({mode!r}) returned {pipeline_id!r}.")
        policy = adapter.policy_stage_id(mode)
        if policy not in ids:
            raise _fail(
                adapter, f"mode {mode!r}: policy_stage_id {policy} is not among {sorted(ids)}."
            )
        synced = tuple(adapter.weight_sync_stage_ids(mode))
        if not synced or not set(synced) <= ids:
            raise _fail(
                adapter,
                f"mode {mode!r}: weight_sync_stage_ids {synced} must be a non-empty subset "
                f"of the stages {sorted(ids)}.",
            )
        prefixes = adapter.weight_sync_prefixes(mode)
        if prefixes is not None and (
            not isinstance(prefixes, tuple) or not prefixes or not all(isinstance(p, str) and p for p in prefixes)
        ):
            raise _fail(
                adapter,
                f"weight_sync_prefixes({mode!r}) returned {prefixes!r}; return None (send every parameter) "
                "or a non-empty tuple of name prefixes such as ('talker.',).",
            )
    _check_unknown_mode(adapter)


def _stages(adapter: RolloutAdapter, mode: str) -> tuple[StageConfig, ...]:
    try:
        return validate_stage_topology(adapter.build_stage_configs(mode))
    except OmniContractError as exc:
        raise _fail(adapter, f"build_stage_configs({mode!r}) is invalid: {exc}") from exc


def _check_unknown_mode(adapter: RolloutAdapter) -> None:
    hooks: dict[str, Callable[[str], object]] = {
        "build_stage_configs": adapter.build_stage_configs,
        "rollout_flags": adapter.rollout_flags,
        "get_pipeline_id": adapter.get_pipeline_id,
    }
    for name, hook in hooks.items():
        try:
            hook(_NO_SUCH_MODE)
        except UnknownModeError as exc:
            unnamed = [mode for mode in adapter.modes if mode not in str(exc)]
            if _NO_SUCH_MODE not in str(exc) or unnamed:
                raise _fail(
                    adapter,
                    f"{name}'s error for an unknown mode must name it and every valid mode "
                    f"(missing: {unnamed or [_NO_SUCH_MODE]}); call self.check_mode(mode).",
                ) from exc
        else:
            raise _fail(
                adapter,
                f"{name}({_NO_SUCH_MODE!r}) did not raise UnknownModeError; call "
                "self.check_mode(mode) first.",
            )


def check_combine_engine_outputs(adapter: RolloutAdapter) -> None:
    """``combine_engine_outputs`` accepts every stage's output, aborted outputs with empty
    token ids, and an empty list, and returns only outputs it was given (an override only
    outputs of ``final_output`` stages)."""
    overridden = type(adapter).combine_engine_outputs is not RolloutAdapter.combine_engine_outputs
    for mode in adapter.modes:
        stages = _stages(adapter, mode)
        final_ids = {stage.stage_id for stage in stages if stage.final_output}
        normal = [StageOutput(stage.stage_id, token_ids=(1, 2, 3)) for stage in stages]
        aborted = [StageOutput(stage.stage_id, finished=False, aborted=True) for stage in stages]
        for label, outputs in (("outputs", normal), ("aborted outputs", aborted), ("no outputs", [])):
            try:
                combined = tuple(adapter.combine_engine_outputs(outputs, mode))
            except Exception as exc:
                raise _fail(
                    adapter, f"combine_engine_outputs failed on {label} in mode {mode!r}: {exc!r}"
                ) from exc
            foreign = [out for out in combined if not any(out is given for given in outputs)]
            if foreign:
                raise _fail(
                    adapter,
                    f"combine_engine_outputs returned outputs it was not given on {label} "
                    f"in mode {mode!r}.",
                )
            if overridden and any(out.stage_id not in final_ids for out in combined):
                raise _fail(
                    adapter,
                    f"combine_engine_outputs kept a stage not marked final_output in mode "
                    f"{mode!r} (final stages: {sorted(final_ids)}).",
                )


def check_postprocess_alignment(
    adapter: RolloutAdapter,
    sample: RolloutSample,
    outputs: Sequence[StageOutput],
    mode: str,
    specs: Mapping[str, ExtraFieldSpec],
) -> RolloutSample:
    """``postprocess_agent_loop_output`` returns an aligned sample whose namespaced extra
    fields are declared in ``specs`` (the training adapter's) and match their shapes."""
    result = adapter.postprocess_agent_loop_output(sample, outputs, mode)
    if not isinstance(result, RolloutSample):
        raise _fail(adapter, f"postprocess_agent_loop_output returned {type(result).__name__}.")
    misaligned = result.misaligned_fields()
    if misaligned:
        raise _fail(
            adapter,
            f"postprocess_agent_loop_output: {misaligned} do not align with "
            f"{len(result.response_ids)} response_ids.",
        )
    try:
        result.validate_extra_fields(specs)
    except OmniContractError as exc:
        raise _fail(adapter, f"postprocess_agent_loop_output: {exc}") from exc
    return result


def check_prepare_model_inputs(
    adapter: TrainingAdapter,
    model_inputs: dict[str, Any],
    micro_batch: Mapping[str, Any],
    model_config: Any,
) -> None:
    """On a valid ``micro_batch`` the hook keeps every model input; it raises, naming the
    field, when a required field is missing, a row has the wrong shape, or fields disagree
    on the number of rows."""
    specs = adapter.extra_field_specs
    check_extra_field_keys(specs)
    absent = sorted(key for key, spec in specs.items() if spec.required and key not in micro_batch)
    if absent:
        raise ContractViolation(
            f"The example micro-batch lacks required fields {absent}; pass a valid one."
        )
    prepared = adapter.prepare_model_inputs(dict(model_inputs), micro_batch, model_config)
    lost = sorted(set(model_inputs) - set(prepared))
    if lost:
        raise _fail(adapter, f"prepare_model_inputs dropped model inputs {lost}.")
    several_present = sum(key in micro_batch for key in specs) > 1
    for key, spec in specs.items():
        if key not in micro_batch:
            continue
        rows = list(micro_batch[key])
        cases: dict[str, dict[str, Any]] = {
            "a wrongly shaped row": {**micro_batch, key: [_wrong_shape(spec), *rows[1:]]},
        }
        if spec.required:
            cases["the field missing"] = {k: v for k, v in micro_batch.items() if k != key}
        if several_present:
            cases["a row fewer than the other fields"] = {**micro_batch, key: rows[:-1]}
        for label, broken in cases.items():
            _expect_error_naming(adapter, key, label, model_inputs, broken, model_config)


def _wrong_shape(spec: ExtraFieldSpec) -> object:
    return [0] if not spec.shape else 0


def _expect_error_naming(
    adapter: TrainingAdapter,
    key: str,
    label: str,
    model_inputs: dict[str, Any],
    micro_batch: Mapping[str, Any],
    model_config: Any,
) -> None:
    try:
        adapter.prepare_model_inputs(dict(model_inputs), micro_batch, model_config)
    except Exception as exc:
        if key not in str(exc):
            raise _fail(
                adapter, f"prepare_model_inputs raised on {label} but did not name {key!r}: {exc}"
            ) from exc
        return
    raise _fail(
        adapter,
        f"prepare_model_inputs accepted a micro-batch with {label} for {key!r}; it must raise "
        "rather than build a different trajectory.",
    )


def check_extra_field_keys(specs: Mapping[str, ExtraFieldSpec]) -> None:
    """Spec keys match the spec objects and are namespaced."""
    for key, spec in specs.items():
        if key != spec.key or not is_namespaced(key):
            raise ContractViolation(
                f"extra_field_specs entry {key!r} holds a spec for {spec.key!r}; key them by "
                "their own namespaced key."
            )


__all__ = [
    "check_chat_templates",
    "check_combine_engine_outputs",
    "check_extra_field_keys",
    "check_no_split_modules",
    "check_postprocess_alignment",
    "check_prepare_model_inputs",
    "check_rollout_modes",
    "check_rollout_registration",
    "check_strip_modules",
    "check_training_registration",
]
