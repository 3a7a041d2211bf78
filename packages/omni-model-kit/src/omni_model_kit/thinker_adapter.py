"""The training adapter of an Omni checkpoint's thinker (text, vision and audio in; text out).

RL trains the thinker only: the engines load the package's thinker policy class (built on
:class:`omni_model_kit.thinker_policy.ThinkerPolicyMixin`), which builds the thinker alone,
so the speech stages are neither allocated nor read and nothing is stripped; the encoders
are frozen by default. A model package subclasses :class:`OmniThinkerAdapter`, names its
policy and processor classes, and registers the subclass under its architecture::

    @TrainingAdapter.register("MyOmniForConditionalGeneration", stage="thinker")
    class MyThinkerAdapter(OmniThinkerAdapter):
        lora_exclude_modules = r".*(visual|audio_tower|lm_head|talker|vocoder).*"
        rollout_pipeline = "my_omni"
        policy_path = "my_omni.thinker_policy.MyThinkerPolicy"
        processor_path = "my_omni.processor.MyThinkerProcessor"

Nothing heavy is imported at module import (the entry point only registers the class): the
two classes are imported when the engines first ask for them.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, ClassVar

from omni_contracts import TrainingAdapter

from omni_model_kit.chat_template import load_chat_template


def load_class(path: str) -> Any:
    """The class at ``path``, ``"package.module.ClassName"`` (imported now)."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


class OmniThinkerAdapter(TrainingAdapter):
    """Trains the thinker of an Omni checkpoint (not registered itself: subclass it).

    Args:
        freeze_vision_tower: keep the vision encoder's weights fixed (default).
        freeze_audio_tower: keep the audio encoder's weights fixed (default).
    """

    # LoRA defaults: attention projections of the thinker's text decoder; never the heads,
    # the encoders (the audio tower has q/k/v_proj too) or the speech stages: a subclass's
    # lora_exclude_modules names them.
    lora_target_modules = ("q_proj", "k_proj", "v_proj", "o_proj")
    options = ("freeze_vision_tower", "freeze_audio_tower")
    modalities = ("text", "image", "audio", "video")

    policy_path: ClassVar[str]
    """The thinker policy class (``"package.module.ClassName"``): :meth:`policy_class`."""

    processor_path: ClassVar[str]
    """The processor class, a transformers processor with
    :class:`~omni_model_kit.thinker_processor.ThinkerProcessorMixin`."""

    def __init__(self, *, freeze_vision_tower: bool = True, freeze_audio_tower: bool = True) -> None:
        self.freeze_vision_tower = freeze_vision_tower
        self.freeze_audio_tower = freeze_audio_tower

    def policy_class(self, model_config: Any) -> Any:
        return load_class(self.policy_path)

    def get_strip_modules(self, model_config: Any) -> Sequence[str]:
        return ()  # the policy class never builds the speech stages

    def thinker_config(self, model_config: Any) -> Any:
        """The checkpoint config's ``thinker_config``, which the processor computes positions
        with.

        Raises:
            ValueError: the config has none.
        """
        thinker = getattr(model_config, "thinker_config", None)
        if thinker is None:
            raise ValueError(
                f"{type(self).__name__} expects a checkpoint config with a thinker_config, got "
                f"{type(model_config).__name__}."
            )
        return thinker

    def configure_processor(self, model_path: str, model_config: Any) -> Any:
        processor = load_class(self.processor_path).from_pretrained(model_path)
        processor.bind_thinker_config(self.thinker_config(model_config))
        return processor

    def configure_tokenizer(self, model_path: str, model_config: Any) -> Any:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_path)
        if not tokenizer.chat_template:
            tokenizer.chat_template = load_chat_template(model_path)
        return tokenizer

    def configure_model(self, module: Any, model_config: Any) -> None:
        policy = self.policy_class(model_config)
        if not isinstance(module, policy):
            raise TypeError(
                f"{type(self).__name__} trains {policy.__name__} (its policy_class), got "
                f"{type(module).__name__}; load the checkpoint with {policy.__name__}.from_pretrained(path)."
            )
        super().configure_model(module, model_config)
        if self.freeze_vision_tower:
            module.thinker.visual.requires_grad_(False)
        if self.freeze_audio_tower:
            module.thinker.audio_tower.requires_grad_(False)


__all__ = ["OmniThinkerAdapter", "load_class"]
