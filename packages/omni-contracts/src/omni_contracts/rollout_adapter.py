"""The rollout side of a model package: how a generation pipeline is set up and read back.

The trainer resolves one adapter per run from the pipeline name
(``actor_rollout_ref.rollout.engine_kwargs.vllm_omni.pipeline_name``). Engines call
``ensure_pipeline_registered`` once at start-up, then ``build_stage_configs``,
``rollout_flags`` and the engine-extras hooks when they build their configuration, then
``policy_logit_mask`` once before the first request, ``prepare_engine_prompt`` per request,
``combine_engine_outputs`` per finished request, ``postprocess_agent_loop_output`` per sample
handed to training, and ``weight_sync_prefixes`` at each weight sync.

The defaults describe a single-stage, single-output autoregressive model.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from omni_contracts.errors import RegistrationError, SchemaError, UnknownModeError
from omni_contracts.plugins import default_loader
from omni_contracts.registry import AdapterRegistry
from omni_contracts.sample import RolloutSample, StageOutput
from omni_contracts.topology import StageConfig

R = TypeVar("R", bound="type[RolloutAdapter]")
StageFlags = Mapping[int, Mapping[str, object]]


@dataclass(frozen=True)
class LogitMask:
    """What the policy stage may never sample, in that stage's own vocabulary.

    Attributes:
        vocab_size: the width of the ids the stage may sample; logits at and past it (the
            padded tail of an output head) are masked. A text stage: the tokenizer's length;
            a talker: its codec vocabulary.
        banned_token_ids: ids inside that width that are masked too (a text policy's media
            placeholders, a talker's codec control ids).

    Raises:
        SchemaError: a width below 1, or a banned id outside ``[0, vocab_size)`` -- a ban list
            built for another stage (on a GPU, masking an id past the logits' width is a
            device-side assert; inside it, it silently bans a token of this stage).
    """

    vocab_size: int
    banned_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "banned_token_ids", tuple(sorted({int(i) for i in self.banned_token_ids})))
        if self.vocab_size < 1:
            raise SchemaError(f"A logit mask needs the stage's vocabulary size (>= 1), got {self.vocab_size}.")
        outside = [i for i in self.banned_token_ids if not 0 <= i < self.vocab_size]
        if outside:
            raise SchemaError(
                f"Banned ids {outside[:5]} lie outside the policy stage's {self.vocab_size} logits: the ban list "
                "was built for another stage's vocabulary. Build it from the policy stage's own ids "
                "(RolloutAdapter.policy_logit_mask)."
            )


class RolloutAdapter(abc.ABC):
    """Base class of rollout adapters; subclass it and register with :meth:`register`."""

    modes: ClassVar[tuple[str, ...]] = ()
    """Every pipeline mode the adapter supports, e.g. ``("thinker_only", "full")``."""

    interleaves_soundtracks: ClassVar[bool] = False
    """Whether the engine lays a video's soundtrack out among its frames when a request's
    ``mm_processor_kwargs`` say ``use_audio_in_video`` (the frames and the track sent as
    the request's video and audio, the prompt's video folded to one placeholder by the
    processor's ``dedup_pad_tokens``) as the training processor does. A run that interleaves
    soundtracks is refused on a pipeline that does not."""

    vllm_plugins: ClassVar[tuple[str, ...]] = ()
    """The vLLM general plugins (``vllm.general_plugins`` entry-point names) the pipeline's
    results depend on. vLLM loads every installed one unless ``VLLM_PLUGINS`` lists a subset;
    a run whose ``VLLM_PLUGINS`` leaves one of these out is refused."""

    @classmethod
    def register(cls, pipeline: str) -> Callable[[R], R]:
        """Class decorator: ``@RolloutAdapter.register("my_pipeline")``.

        Raises:
            RegistrationError: empty name or modes, abstract class, or the name is taken.
        """
        if not pipeline:
            raise RegistrationError("A rollout adapter needs a non-empty pipeline name.")

        def decorate(adapter_cls: R) -> R:
            if not adapter_cls.modes:
                raise RegistrationError(
                    f"{adapter_cls.__qualname__} declares no pipeline modes: set the class "
                    "attribute `modes`, e.g. modes = ('thinker_only',)."
                )
            rollout_adapters.add(pipeline, adapter_cls)
            return adapter_cls

        return decorate

    def check_mode(self, mode: str) -> None:
        """Raise :class:`UnknownModeError` listing the valid modes if ``mode`` is not one."""
        if mode not in self.modes:
            raise UnknownModeError(
                f"{type(self).__name__} has no pipeline mode {mode!r}; "
                f"valid modes: {', '.join(self.modes)}."
            )

    @abc.abstractmethod
    def build_stage_configs(self, mode: str) -> Sequence[StageConfig]:
        """The pipeline topology for ``mode`` (validated by the engine)."""

    @abc.abstractmethod
    def rollout_flags(self, mode: str) -> StageFlags:
        """Per-stage engine flags by stage id (e.g. ``{0: {"return_hidden_states": True}}``)."""

    @abc.abstractmethod
    def get_pipeline_id(self, mode: str) -> str:
        """The engine's pipeline type string, used to generate its deploy config."""

    def ensure_pipeline_registered(self) -> None:
        """Register the pipeline with the engine if the engine does not know it yet."""

    def get_engine_hf_overrides(self, mode: str) -> dict[str, Any]:
        """Hugging Face config overrides the engine applies when loading the model."""
        return {}

    def get_stage_engine_extras(self, stage_id: int, mode: str) -> dict[str, Any]:
        """Extra engine arguments for one stage (batching, sampling defaults, ...); merged last.
        Not its devices, parallelism or ``gpu_memory_utilization``: the deploy config owns
        those (it splits the rollout's memory share over the stages on each GPU)."""
        return {}

    def upstream_deploy_file(self, mode: str) -> str | None:
        """The engine's own deploy file for this mode's pipeline (a name in vLLM-Omni's
        ``deploy/`` folder, e.g. ``"qwen3_omni_moe.yaml"``). A generated deploy config
        replaces that file, so each stage keeps its settings (CUDA platform section applied)
        but those the deploy config deliberately changes: placement, memory shares (split in
        proportion to the file's), sleep mode, the policy's knobs and sampling defaults.
        Without it a stage runs on the engine's bare defaults (a talker stops after 16
        tokens). ``None``: none."""
        return None

    def policy_stage_id(self, mode: str) -> int:
        """The stage whose sampling parameters and log-probs define the trained policy."""
        return 0

    def weight_sync_stage_ids(self, mode: str) -> tuple[int, ...]:
        """The stages that receive the actor's weights after each update."""
        return (self.policy_stage_id(mode),)

    def weight_sync_prefixes(self, mode: str) -> tuple[str, ...] | None:
        """Name prefixes of the actor parameters the weight-sync stages load, under the
        names those stages expect (e.g. ``("talker.",)``); the engines send only those.

        Called by the engines at each weight sync (:func:`select_synced_weights`). ``None``
        (the default): every parameter the actor holds -- right when the actor holds only
        what the synced stages load. Override when the actor also holds frozen stages that
        keep their own weights in the engine (a talker's actor holds the thinker).
        """
        return None

    def policy_logit_mask(self, mode: str, model_config: Any, text_mask: LogitMask) -> LogitMask:
        """What the policy stage of ``mode`` must never sample, in its own vocabulary.

        Called once by the vLLM-Omni server at start-up, before any request; the mask is
        applied on the policy stage only. ``model_config`` is the checkpoint's HF config;
        ``text_mask`` is the mask of a text policy, built by the engine: the tokenizer's
        length and the processor's media placeholders. A ban list belongs to the stage it was
        built for, so the default returns ``text_mask`` only when the policy stage emits
        text; an adapter whose policy stage samples another vocabulary (a talker's codec ids)
        overrides this with that stage's width and bans.

        Raises:
            NotImplementedError: the policy stage does not emit text and the adapter does
                not override this method.
        """
        stage = next(s for s in self.build_stage_configs(mode) if s.stage_id == self.policy_stage_id(mode))
        if stage.output_type != "text":
            raise NotImplementedError(
                f"{type(self).__name__}: the policy stage of mode {mode!r} (stage {stage.stage_id}) emits "
                f"{stage.output_type!r}, not text; the tokenizer's vocabulary and the media placeholders do not "
                "apply to it. Override policy_logit_mask to return that stage's LogitMask(vocab_size, banned ids)."
            )
        return text_mask

    def engine_prompt_information(self, mode: str, model_config: Any) -> dict[str, Any]:
        """What every engine prompt of ``mode`` carries as vLLM-Omni's
        ``additional_information``, which the engine hands to its later stages' input
        processors (``model_config``: the checkpoint's HF config). Called once by the
        vLLM-Omni server at start-up; the default carries nothing."""
        self.check_mode(mode)
        return {}

    def prepare_engine_prompt(
        self,
        prompt_ids: Sequence[int],
        multi_modal_data: Mapping[str, Any] | None,
        mm_processor_kwargs: Mapping[str, Any] | None,
    ) -> dict[str, Any] | None:
        """A custom engine prompt, or ``None`` to let the engine build its default one.

        A custom prompt must include ``mm_processor_kwargs`` whenever it is not ``None``
        (the engine adds it only to its own default prompt); see :func:`check_engine_prompt`.
        """
        return None

    def combine_engine_outputs(
        self, outputs: Sequence[StageOutput], mode: str
    ) -> tuple[StageOutput, ...]:
        """Choose which stage outputs of one request are kept.

        The default keeps the engine's single output: the last one. Override (for example
        with :func:`keep_final_outputs`) to keep every ``final_output`` stage. Any
        combiner must accept aborted outputs with empty token ids and an empty list.
        """
        return (outputs[-1],) if outputs else ()

    def postprocess_agent_loop_output(
        self, sample: RolloutSample, outputs: Sequence[StageOutput], mode: str
    ) -> RolloutSample:
        """Map engine outputs to the trained policy sequence.

        The default returns ``sample`` unchanged (text-token stages). A talker adapter puts
        the sampled policy sequence in ``response_ids``, keeps mask and log-probs aligned,
        and stores model-native data under namespaced ``extra_fields`` keys.
        """
        return sample


def check_engine_prompt(
    prompt: Mapping[str, Any], mm_processor_kwargs: Mapping[str, Any] | None
) -> None:
    """Raise if a custom prompt drops non-None ``mm_processor_kwargs``.

    Raises:
        SchemaError: naming the missing or differing key.
    """
    if mm_processor_kwargs is None:
        return
    carried = prompt.get("mm_processor_kwargs")
    if carried is None:
        raise SchemaError(
            "Custom engine prompt has no 'mm_processor_kwargs' but the request has "
            f"{dict(mm_processor_kwargs)!r}; copy them into the prompt (the engine only adds "
            "them to its default prompt)."
        )
    differing = sorted(k for k in mm_processor_kwargs if carried.get(k) != mm_processor_kwargs[k])
    if differing:
        raise SchemaError(
            f"Custom engine prompt's mm_processor_kwargs differ from the request's on "
            f"{differing}; pass the request's values through."
        )


rollout_adapters: AdapterRegistry[str, RolloutAdapter] = AdapterRegistry(
    "rollout adapter",
    RolloutAdapter,
    describe_key=lambda pipeline: f"pipeline {pipeline!r}",
    loader=default_loader,
)


def get_rollout_adapter(pipeline: str) -> RolloutAdapter:
    """A fresh instance of the adapter registered for ``pipeline``.

    Raises:
        AdapterNotFoundError: nothing is registered for the name after loading packages.
        ModelPackageImportError: an installed model package failed to import.
    """
    return rollout_adapters.get(pipeline)()
