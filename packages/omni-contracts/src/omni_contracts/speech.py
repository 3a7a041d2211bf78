"""The optional speech contract, for models whose trained or frozen stages speak. A text
model package never imports it; ``omni_contracts`` does not export it.

A model package's talker policy class implements :class:`SpeechPolicy`; the local engine
finds it under any wrapper (:func:`find_speech_policy`) and turns each
:class:`SpeechRollout` into a rollout sample (``prompt_ids``, ``response_ids``,
``response_logprobs``, ``extra_fields``) plus the waveform the rewards read. A training
adapter of a checkpoint that also speaks may offer a :class:`TalkerDriftProbe` for thinker
runs (:class:`SpeakingAdapter`, found by :func:`talker_drift_probe`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


SOURCE_TRUNCATED = "source_truncated"
"""A speech sample's engine-side flag: the text it spoke was cut at its length limit (the
thinker's answer), so the rollout adapter masks it out of training; the rollout servers carry
it in ``reward_extra_info`` and the trainer counts it per step."""


@dataclass
class SpeechRollout:
    """One sampled rendition of a text as speech.

    ``prompt_ids`` are the speech stage's own prompt (its prefill ids, one per row of the
    conditioning it consumed); ``response_ids`` the sampled tokens of the trained codebook
    with ``response_logprobs`` under the sampling distribution; ``extra_fields`` the
    namespaced fields the training adapter declares; ``waveform`` the decoded audio
    (``[samples]``, float, nominal full scale ±1) at the policy's ``speech_sample_rate``.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float]
    extra_fields: dict[str, Any]
    waveform: Any
    finished: bool  # ended with the end-of-speech token (not cut at the length limit)


@runtime_checkable
class SpeechPolicy(Protocol):
    """The sampling side of a speech-stage policy (see the module docstring)."""

    @property
    def speech_sample_rate(self) -> int:
        """Samples per second of the decoded waveforms."""
        ...

    @property
    def speakers(self) -> tuple[str, ...]:
        """The voices ``sample_speech`` can speak in (its ``speaker``); the first is the default."""
        ...

    def sample_speech(
        self,
        sequence: Any,
        *,
        n: int,
        max_new_tokens: int,
        temperature: float = 1.0,
        speaker: str | None = None,
        media: Mapping[str, Any] | None = None,
    ) -> list[SpeechRollout]:
        """``n`` renditions of the assistant text that ends ``sequence`` (``[1, S]`` ids: the
        chat prompt, then the assistant turn with the text to speak)."""
        ...


def find_speech_policy(module: Any) -> SpeechPolicy:
    """The :class:`SpeechPolicy` inside ``module`` (the module itself, or under PEFT's or
    another wrapper's ``base_model`` / ``model`` attributes).

    Raises:
        TypeError: no speech policy is found; the message names the classes looked at.
    """
    seen = []
    current = module
    for _ in range(4):
        if isinstance(current, SpeechPolicy):
            return current
        seen.append(type(current).__name__)
        inner = getattr(current, "base_model", None)
        if inner is None or inner is current:
            inner = getattr(current, "model", None)
        if inner is None or inner is current:
            break
        current = inner
    raise TypeError(
        f"No speech policy (sample_speech, speech_sample_rate, speakers) in {' -> '.join(seen)}: the training "
        "adapter's policy_class for this stage must implement omni_contracts.SpeechPolicy."
    )


@dataclass
class ProbeSpeech:
    """A drift probe spoken anew by the frozen talker from the thinker being trained."""

    text: str  # what was spoken
    waveform: Any  # ``[samples]``, float, nominal full scale ±1
    sample_rate: int


@runtime_checkable
class TalkerDriftProbe(Protocol):
    """Measures how a thinker being trained changes what a frozen talker does with its
    hidden states, on fixed probes (see :class:`SpeakingAdapter`)."""

    def measure(self, policy: Any) -> dict[str, float]:
        """``{"talker/drift_kl": ...}`` (and any other ``talker/*`` metric) for the thinker
        inside ``policy`` (the trained policy module, possibly wrapped)."""
        ...

    def penalty(self, policy: Any) -> Any:
        """The drift as a scalar tensor, differentiable in the thinker's parameters: what a
        run adds to the thinker's loss to keep the talker's behaviour."""
        ...

    def speak(self, policy: Any) -> list[ProbeSpeech]:
        """Each probe spoken once more by the frozen talker, reading the thinker inside
        ``policy`` (seeded: the same thinker gives the same speech), for audio rewards."""
        ...


@runtime_checkable
class SpeakingAdapter(Protocol):
    """A training adapter of a checkpoint that also speaks."""

    def talker_drift_probe(self, model_path: str, model_config: Any) -> TalkerDriftProbe | None:
        """A :class:`TalkerDriftProbe` for thinker runs, or ``None`` (not measured). It holds
        its own frozen copy of the checkpoint (the initial thinker and the talker): twice the
        memory of the weights, so the engines build it only on request."""
        ...


def talker_drift_probe(adapter: object, model_path: str, model_config: Any) -> TalkerDriftProbe | None:
    """``adapter``'s drift probe for the checkpoint; ``None`` when it is not a
    :class:`SpeakingAdapter` or offers none."""
    if not isinstance(adapter, SpeakingAdapter):
        return None
    return adapter.talker_drift_probe(model_path, model_config)
