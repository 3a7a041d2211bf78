"""The trained policy of a thinker/talker checkpoint when only the thinker trains.

An Omni checkpoint's top-level class holds ``thinker``, ``talker`` and a vocoder; its
``forward`` (when it has one) is not the thinker's. A model package defines a small
``PreTrainedModel`` subclass that builds only ``thinker`` and mixes this in, so the
thinker's ``forward``, ``generate`` and embedding accessors are the policy's own methods
(see :meth:`omni_contracts.TrainingAdapter.policy_class`)::

    class MyThinkerPolicy(ThinkerPolicyMixin, MyOmniPreTrainedModel, GenerationMixin):
        config_class = MyOmniConfig
        thinker_class = MyThinkerForConditionalGeneration
        thinker_decoder_layer = "MyThinkerDecoderLayer"
        _keys_to_ignore_on_load_unexpected = [r"^talker\\.", r"^vocoder\\."]

Parameter names stay ``thinker.*``, the checkpoint's: the weights load by name and sync to a
rollout engine serving the whole checkpoint unchanged. Nothing here imports torch.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ThinkerPolicyMixin:
    """Builds ``self.thinker`` alone and delegates the policy's forward, generation and
    embedding accessors to it.

    List it before the ``PreTrainedModel`` base, whose ``__init__`` it extends and whose
    accessors it replaces, and end the bases with transformers' ``GenerationMixin`` (a
    class defining ``prepare_inputs_for_generation`` is expected to be one; ``generate``
    stays the thinker's). FSDP shards at :attr:`thinker_decoder_layer` only: ``post_init``
    merges in the units the children declare (whole audio and vision encoders), and under
    verl's FSDP2 an encoder unit fails its forward (mixed Tensor and DTensor in the audio
    encoder's layer norm; verl 0.9.1, measured on CPU).
    """

    thinker_class: ClassVar[Any]
    """The checkpoint's thinker class (built from ``config.thinker_config``)."""

    thinker_decoder_layer: ClassVar[str]
    """The thinker's text decoder layer class name: the FSDP unit."""

    thinker: Any
    _no_split_modules: Any  # PreTrainedModel's; set per instance after ``post_init``

    def __init__(self, config: Any) -> None:
        super().__init__(config)  # type: ignore[call-arg]  # the PreTrainedModel base
        self.thinker = self.thinker_class._from_config(config.thinker_config)
        self.post_init()  # type: ignore[attr-defined]
        self._no_split_modules = [self.thinker_decoder_layer]

    def forward(self, *args: Any, logits_to_keep: int = 0, **kwargs: Any) -> Any:
        """The thinker's forward. ``logits_to_keep=k > 0`` projects only the last ``k``
        positions through the LM head, as transformers' causal LMs do with that argument:
        the thinker classes lack it, and a long multimodal prompt's logits (``[B, L, V]``)
        are the largest tensor of the actor's forward while only the response's are read.
        It is done with a forward pre-hook on the LM head, removed when the call returns."""
        if logits_to_keep <= 0:
            return self.thinker(*args, **kwargs)

        def last_positions(module: Any, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
            hidden, *rest = inputs
            return (hidden[:, -logits_to_keep:], *rest)

        handle = self.thinker.get_output_embeddings().register_forward_pre_hook(last_positions)
        try:
            return self.thinker(*args, **kwargs)
        finally:
            handle.remove()

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        return self.thinker.generate(*args, **kwargs)

    def prepare_inputs_for_generation(self, *args: Any, **kwargs: Any) -> Any:
        # PEFT's causal-LM wrapper (verl builds one) reads it when it wraps the policy.
        return self.thinker.prepare_inputs_for_generation(*args, **kwargs)

    def get_input_embeddings(self) -> Any:
        return self.thinker.get_input_embeddings()

    def set_input_embeddings(self, value: Any) -> None:
        self.thinker.set_input_embeddings(value)

    def get_output_embeddings(self) -> Any:
        return self.thinker.get_output_embeddings()

    def set_output_embeddings(self, value: Any) -> None:
        self.thinker.set_output_embeddings(value)
