"""The training side of a model package: how to load, trim and feed a model for RL.

The trainer resolves one adapter per run from ``(architecture, stage)``, where the
architecture is the checkpoint config's ``architectures[0]``. Call order, in both engines:

0. ``checkpoint_problems`` in the trainer's pre-flight, on ``config.json`` as written;
1. ``register_auto_classes()`` once, before anything is loaded;
2. ``configure_tokenizer`` and ``configure_processor`` when the dataset is built;
3. the engine loads the model -- ``policy_class(model_config).from_pretrained(path)`` when
   the adapter names a class, else through ``auto_model_class`` -- then calls
   ``configure_model`` before FSDP wrapping and before LoRA injection;
4. ``prepare_model_inputs`` for every actor forward (old/ref log-probs and the update).

A trained policy whose forward is not the checkpoint class's own (the thinker of an Omni
checkpoint, say) is a class of its own, returned by ``policy_class``: its methods are defined
on the class and its submodule names equal the checkpoint's, so the weights load by name
and sync to the rollout engine unchanged. Adapters never re-bind methods on a loaded
instance (``module.forward = ...``): FSDP, PEFT and pickling see the class, not the patch.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeVar, get_args

from omni_contracts.errors import (
    AdapterNotFoundError,
    ExtraFieldError,
    RegistrationError,
    SchemaError,
)
from omni_contracts.extra_fields import ExtraFieldSpec, validate_extra_fields
from omni_contracts.plugins import default_loader
from omni_contracts.registry import AdapterRegistry

RESPONSE_LENGTHS_KEY = "response_lengths"
"""Micro-batch key with each row's response length, binding the ``response_length`` symbol."""

Stage = Literal["thinker", "talker", "all"]
"""Which autoregressive stage of a multi-stage model is trained; ``all`` for single-stage models."""

STAGES: tuple[str, ...] = get_args(Stage)

MODALITIES: tuple[str, ...] = ("text", "image", "audio", "video")
"""What a trained model can read (:attr:`TrainingAdapter.modalities`)."""

TrainingKey = tuple[str, str]
T = TypeVar("T", bound="type[TrainingAdapter]")


def _describe_training_key(key: TrainingKey) -> str:
    return f"architecture {key[0]!r}, stage {key[1]!r}"


class TrainingAdapter(abc.ABC):
    """Base class of training adapters; subclass it and register with :meth:`register`.

    ``model_config`` arguments are the checkpoint's Hugging Face config object (typed
    ``Any`` here so that this package never imports transformers).
    """

    auto_model_class: ClassVar[str | None] = None
    """Name of the ``transformers`` auto class that loads this architecture, when the
    engine's default (``AutoModelForMultimodalLM``) does not own it."""

    extra_field_specs: ClassVar[Mapping[str, ExtraFieldSpec]] = {}
    """Model-native rollout fields this adapter consumes in :meth:`prepare_model_inputs`."""

    lora_target_modules: ClassVar[tuple[str, ...] | None] = None
    """Default LoRA ``target_modules`` (PEFT) when the user names none."""

    lora_exclude_modules: ClassVar[str | None] = None
    """Default LoRA ``exclude_modules`` regex (heads, encoders, inference-only stages)."""

    options: ClassVar[tuple[str, ...]] = ()
    """Keyword arguments the constructor takes from the trainer's config (e.g.
    ``freeze_vision_tower``); :func:`resolve_training_adapter` passes exactly these."""

    rollout_pipeline: ClassVar[str | None] = None
    """The rollout adapter (pipeline name) that generates with this model; the trainer refuses
    a run whose ``actor_rollout_ref.rollout.pipeline_name`` names another one."""

    modalities: ClassVar[tuple[str, ...]] = ("text",)
    """What the trained model reads: ``"text"`` and any of ``"image"``, ``"audio"``,
    ``"video"``. The default is a text-only model (a causal LM), whose processor may be its
    tokenizer; a model that takes media declares them, and its ``configure_processor``
    must return an :class:`~omni_contracts.OmniProcessor` (both engines check it)."""

    @classmethod
    def takes_media(cls) -> bool:
        """Whether the model reads anything besides text (:attr:`modalities`)."""
        return any(modality != "text" for modality in cls.modalities)

    @classmethod
    def register(cls, architecture: str, *, stage: Stage) -> Callable[[T], T]:
        """Class decorator: ``@TrainingAdapter.register("MyArch", stage="thinker")``.

        Raises:
            RegistrationError: unknown stage, abstract class, or the key is already taken.
        """
        if stage not in STAGES:
            raise RegistrationError(
                f"Unknown training stage {stage!r} for architecture {architecture!r}; "
                f"valid stages: {', '.join(STAGES)}."
            )

        def decorate(adapter_cls: T) -> T:
            _check_options(adapter_cls)
            _check_modalities(adapter_cls)
            training_adapters.add((architecture, stage), adapter_cls)
            return adapter_cls

        return decorate

    def policy_class(self, model_config: Any) -> Any | None:
        """The class the engines load the checkpoint with (``from_pretrained``), or ``None``
        for the one :attr:`auto_model_class` resolves.

        Return a class when the trained policy is part of the checkpoint's model: e.g. a
        ``PreTrainedModel`` whose only child is ``thinker`` and whose ``forward``,
        ``generate`` and embedding accessors are the thinker's. The speech stages are then
        never built or loaded. Its ``config_class`` is the checkpoint's config class and its
        parameter names are the checkpoint's, so loading and weight sync need no renaming.
        Import heavy modules inside this method, not at module import.
        """
        return None

    def checkpoint_problems(self, model_path: str, model_config: Mapping[str, Any]) -> list[str]:
        """What this model package cannot train from the checkpoint at ``model_path``, found
        before anything loads: the trainer's pre-flight calls it with ``config.json`` parsed
        (a plain mapping, as written) and reports each problem with the others (exit status
        2). Each names what is missing and how to fix it; the default finds none. Read only
        small files here: it runs on every start, before the model, tokenizer or data load.
        """
        return []

    @abc.abstractmethod
    def get_strip_modules(self, model_config: Any) -> Sequence[str]:
        """Attribute paths (dotted for nested) of submodules to delete before wrapping.

        Inference-only components the loaded class builds but training does not use; empty
        when :meth:`policy_class` builds none. Called by the default :meth:`configure_model`.
        """

    @abc.abstractmethod
    def configure_processor(self, model_path: str, model_config: Any) -> Any:
        """Load and return the multimodal processor for the checkpoint at ``model_path``."""

    @abc.abstractmethod
    def configure_tokenizer(self, model_path: str, model_config: Any) -> Any:
        """Load and return the tokenizer; it must carry a chat template."""

    def configure_model(self, module: Any, model_config: Any) -> None:
        """Adapt the loaded model in place; runs before FSDP wrapping and LoRA injection.

        The default deletes the submodules named by :meth:`get_strip_modules`. Overrides
        call ``super().configure_model(module, model_config)`` first, then freeze what must
        not train. They set data, never methods: a different forward is a
        :meth:`policy_class`, and ``_no_split_modules`` belongs on that class.
        """
        strip_submodules(module, self.get_strip_modules(model_config))

    def register_auto_classes(self) -> None:
        """Register classes from an optional model package with the transformers Auto APIs."""

    def prepare_model_inputs(
        self,
        model_inputs: dict[str, Any],
        micro_batch: Mapping[str, Any],
        model_config: Any,
    ) -> dict[str, Any]:
        """Add model-native rollout data to the actor's forward inputs.

        ``micro_batch`` holds each declared extra field at its top level, one entry per
        sample (see :func:`omni_contracts.sample.collate_extra_fields`), and may hold
        ``"response_lengths"`` (one int per row) to bind the ``response_length`` symbol. The default
        validates every declared field, passes those with a ``forward_arg`` to the
        forward, and leaves ``model_inputs`` otherwise untouched. A missing or
        inconsistent field raises; an adapter must never rebuild a different trajectory.

        Raises:
            ExtraFieldError: a required field is missing or a shape is wrong.
        """
        if not self.extra_field_specs:
            return model_inputs
        lengths = micro_batch.get(RESPONSE_LENGTHS_KEY)
        for index, fields in enumerate(micro_batch_rows(micro_batch, self.extra_field_specs)):
            bindings = {"response_length": int(lengths[index])} if lengths is not None else None
            validate_extra_fields(
                fields, self.extra_field_specs, bindings=bindings, where=f"micro-batch row {index}"
            )
        prepared = dict(model_inputs)
        for key, spec in self.extra_field_specs.items():
            if spec.forward_arg is not None and key in micro_batch:
                prepared[spec.forward_arg] = micro_batch[key]
        return prepared


def micro_batch_rows(
    micro_batch: Mapping[str, Any], specs: Mapping[str, ExtraFieldSpec]
) -> list[dict[str, object]]:
    """Split the declared top-level fields of a micro-batch back into one dict per row.

    Raises:
        ExtraFieldError: declared fields disagree on the number of rows.
    """
    present = {key: micro_batch[key] for key in specs if key in micro_batch}
    sizes = {key: len(value) for key, value in present.items()}
    if len(set(sizes.values())) > 1:
        raise ExtraFieldError(
            f"Micro-batch extra fields have different numbers of rows: {sizes}. Every "
            "field must hold one entry per sample."
        )
    rows = next(iter(sizes.values()), 0)
    if rows == 0 and any(spec.required for spec in specs.values()):
        required = ", ".join(sorted(k for k, s in specs.items() if s.required))
        raise ExtraFieldError(
            f"Micro-batch has none of the required extra fields ({required}); the rollout "
            "must store them and batching must move them to the top level."
        )
    return [
        {key: value[row] for key, value in present.items() if value[row] is not None}
        for row in range(rows)
    ]


def strip_submodules(module: Any, paths: Sequence[str]) -> list[str]:
    """Delete the submodules at ``paths`` (dotted attribute paths) from ``module``.

    Deeper paths go first, so ``["talker", "talker.code_predictor"]`` works.

    Raises:
        SchemaError: a path does not exist; the message lists the parent's children.
    """
    removed: list[str] = []
    for path in sorted(set(paths), key=lambda p: p.count("."), reverse=True):
        *parents, name = path.split(".")
        owner = module
        for part in parents:
            owner = getattr(owner, part, None)
            if owner is None:
                break
        if owner is None or not hasattr(owner, name):
            children = _child_names(module if owner is None else owner)
            raise SchemaError(
                f"Cannot strip {path!r}: no such submodule on {type(module).__name__} "
                f"(children there: {', '.join(children) or 'none'}). Fix get_strip_modules."
            )
        delattr(owner, name)
        removed.append(path)
    return removed


def _child_names(module: Any) -> list[str]:
    named_children = getattr(module, "named_children", None)
    if callable(named_children):
        return [name for name, _ in named_children()]
    return sorted(vars(module))


training_adapters: AdapterRegistry[TrainingKey, TrainingAdapter] = AdapterRegistry(
    "training adapter",
    TrainingAdapter,
    describe_key=_describe_training_key,
    loader=default_loader,
)


def _check_options(adapter_cls: type[TrainingAdapter]) -> None:
    """Refuse declared options the constructor does not take as keywords."""
    parameters = inspect.signature(adapter_cls).parameters
    keywords = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    missing = [
        name
        for name in adapter_cls.options
        if not takes_any and (name not in parameters or parameters[name].kind not in keywords)
    ]
    if missing:
        raise RegistrationError(
            f"{adapter_cls.__qualname__} declares options {missing} that its constructor does "
            "not take as keyword arguments; add them to __init__ or remove them from `options`."
        )


def _check_modalities(adapter_cls: type[TrainingAdapter]) -> None:
    """Refuse a ``modalities`` declaration outside :data:`MODALITIES` or without text."""
    declared = adapter_cls.modalities
    unknown = [m for m in declared if m not in MODALITIES] if isinstance(declared, tuple) else [declared]
    if unknown or "text" not in declared:
        raise RegistrationError(
            f"{adapter_cls.__qualname__}.modalities is {declared!r}; declare a tuple holding 'text' and "
            f"any of {', '.join(repr(m) for m in MODALITIES[1:])}."
        )


def architecture_of(model_config: Any) -> str:
    """``architectures[0]`` of a checkpoint's config: a Hugging Face config object or the
    parsed ``config.json`` mapping.

    Raises:
        AdapterNotFoundError: the config names no architecture.
    """
    if isinstance(model_config, Mapping):
        architectures = model_config.get("architectures")
    else:
        architectures = getattr(model_config, "architectures", None)
    if not architectures or not isinstance(architectures[0], str):
        raise AdapterNotFoundError(
            "The checkpoint's config names no architecture (config.json has no "
            "'architectures' list), so no training adapter can be chosen. Add "
            "\"architectures\": [\"<ModelClassName>\"] to its config.json."
        )
    return architectures[0]


def resolve_training_adapter(
    model_config: Any, stage: str, options: Mapping[str, Any] | None = None
) -> TrainingAdapter:
    """The one lookup both engines use: the adapter registered for the checkpoint's
    ``architectures[0]`` and ``stage``, built with the ``options`` it declares.

    Args:
        model_config: the checkpoint's config (Hugging Face config object, or the mapping
            read from ``config.json``).
        stage: ``thinker`` | ``talker`` | ``all``.
        options: the trainer's adapter options (e.g. ``{"freeze_vision_tower": True}``).
            Only the names in the adapter's :attr:`TrainingAdapter.options` reach its
            constructor; the others do not apply to it.

    Raises:
        AdapterNotFoundError: unknown stage, no architecture, or nothing registered.
        ModelPackageImportError: an installed model package failed to import.
    """
    architecture = architecture_of(model_config)
    if stage not in STAGES:
        raise AdapterNotFoundError(
            f"Unknown training stage {stage!r} for architecture {architecture!r}; "
            f"valid stages: {', '.join(STAGES)}."
        )
    adapter_cls = training_adapters.get((architecture, stage))
    given = dict(options or {})
    return adapter_cls(**{name: given[name] for name in adapter_cls.options if name in given})


def get_training_adapter(architecture: str, stage: str) -> TrainingAdapter:
    """A fresh instance of the adapter registered for ``(architecture, stage)``.

    Raises:
        AdapterNotFoundError: nothing is registered for the key after loading packages.
        ModelPackageImportError: an installed model package failed to import.
    """
    if stage not in STAGES:
        raise AdapterNotFoundError(
            f"Unknown training stage {stage!r} for architecture {architecture!r}; "
            f"valid stages: {', '.join(STAGES)}."
        )
    return training_adapters.get((architecture, stage))()
