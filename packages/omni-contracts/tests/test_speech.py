"""Finding the speech policy under the wrappers an engine puts around it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from omni_contracts.speech import SpeechPolicy, SpeechRollout, find_speech_policy


class Talker:
    speech_sample_rate = 24_000
    speakers = ("ethan", "chelsie")

    def sample_speech(
        self, sequence: Any, *, n: int, max_new_tokens: int, temperature: float = 1.0,
        speaker: str | None = None, media: Mapping[str, Any] | None = None,
    ) -> list[SpeechRollout]:
        return [SpeechRollout([1], [2], [-0.5], {}, [0.0], finished=True)] * n


class Wrapper:
    def __init__(self, inner: object, attribute: str) -> None:
        setattr(self, attribute, inner)


def test_found_under_peft_style_wrappers() -> None:
    talker = Talker()
    assert isinstance(talker, SpeechPolicy)
    assert find_speech_policy(talker) is talker
    # PeftModel -> LoraModel (base_model) -> the model (model)
    assert find_speech_policy(Wrapper(Wrapper(talker, "model"), "base_model")) is talker


def test_a_policy_without_speakers_is_not_a_speech_policy() -> None:
    voiceless = type("Voiceless", (), {k: v for k, v in vars(Talker).items() if k != "speakers"})
    assert isinstance(Talker(), SpeechPolicy) and not isinstance(voiceless(), SpeechPolicy)


def test_a_text_policy_is_refused_naming_what_was_searched() -> None:
    class Thinker:
        pass

    with pytest.raises(TypeError, match=r"No speech policy .* in Wrapper -> Thinker.*SpeechPolicy"):
        find_speech_policy(Wrapper(Thinker(), "base_model"))


def test_the_speech_contract_is_optional_and_the_generic_one_names_no_talker() -> None:
    """A text model package sees no speech in the contract it is written against."""
    import subprocess
    import sys

    import omni_contracts
    from omni_contracts import TrainingAdapter
    from omni_contracts.speech import SpeakingAdapter, talker_drift_probe

    assert not {"SpeechPolicy", "SpeechRollout", "TalkerDriftProbe"} & set(omni_contracts.__all__)
    assert not hasattr(TrainingAdapter, "talker_drift_probe")
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, omni_contracts; print('omni_contracts.speech' in sys.modules)"],
        capture_output=True, text=True, check=True,
    )
    assert loaded.stdout.strip() == "False"

    class Speaks:
        def talker_drift_probe(self, model_path: str, model_config: object) -> None:
            return None

    assert isinstance(Speaks(), SpeakingAdapter) and not isinstance(object(), SpeakingAdapter)
    assert talker_drift_probe(object(), "/m", None) is None
