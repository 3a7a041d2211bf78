"""resolve_training_adapter: the one lookup from a checkpoint's config, a stage and options."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from omni_contracts import AdapterNotFoundError, TrainingAdapter, architecture_of, resolve_training_adapter
from omni_contracts.errors import RegistrationError


class _Base(TrainingAdapter):
    def get_strip_modules(self, model_config: Any) -> Sequence[str]:
        return ()

    def configure_processor(self, model_path: str, model_config: Any) -> Any:
        return None

    def configure_tokenizer(self, model_path: str, model_config: Any) -> Any:
        return None


@TrainingAdapter.register("ResolutionTestArch", stage="thinker")
class WithOptions(_Base):
    options = ("freeze_vision_tower",)

    def __init__(self, *, freeze_vision_tower: bool = True) -> None:
        self.freeze_vision_tower = freeze_vision_tower


@TrainingAdapter.register("ResolutionTestPlain", stage="all")
class WithoutOptions(_Base):
    pass


def test_declared_options_reach_the_constructor_and_others_do_not() -> None:
    options = {"freeze_vision_tower": False, "freeze_audio_tower": False}
    adapter = resolve_training_adapter(SimpleNamespace(architectures=["ResolutionTestArch"]), "thinker", options)
    assert isinstance(adapter, WithOptions) and adapter.freeze_vision_tower is False
    # An adapter that declares no options is built without them (no TypeError).
    plain = resolve_training_adapter({"architectures": ["ResolutionTestPlain"]}, "all", options)
    assert isinstance(plain, WithoutOptions)


def test_config_mapping_or_object_without_architectures_is_explained() -> None:
    assert architecture_of({"architectures": ["X"]}) == "X"
    with pytest.raises(AdapterNotFoundError, match="names no architecture"):
        architecture_of(SimpleNamespace())


def test_unknown_stage_lists_the_stages() -> None:
    with pytest.raises(AdapterNotFoundError, match="valid stages: thinker, talker, all"):
        resolve_training_adapter({"architectures": ["ResolutionTestArch"]}, "speaker")


def test_an_option_the_constructor_does_not_take_is_refused_at_registration() -> None:
    with pytest.raises(RegistrationError, match=r"declares options \['freeze_audio_tower'\]"):

        @TrainingAdapter.register("ResolutionTestBad", stage="all")
        class Bad(_Base):
            options = ("freeze_audio_tower",)
