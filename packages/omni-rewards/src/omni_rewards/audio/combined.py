"""Several audio rewards as one: a weighted sum, with each reward's value as a metric.

Built from plain specs, one mapping per reward::

    [
        {"name": "duration", "weight": 1.0, "units_per_s": 2.5},
        {"name": "silence", "weight": 0.5},
        {"name": "http", "weight": 2.0, "label": "asr", "url": "http://asr:8000/score"},
    ]

``name`` is a registered audio reward (``AUDIO_SCORERS``) or ``"http"`` (a remote one);
``weight`` (required, finite, >= 0; 0 reports the reward without paying it); ``label``
(optional) the reward's metric key, default ``name``, distinct across specs. Every other key
is a parameter: the scorer's keyword arguments, or ``HttpScorerConfig``'s fields for
``"http"``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

import numpy as np
from numpy.typing import NDArray

from omni_rewards.api import normalise_output
from omni_rewards.audio.api import AudioScorer, SpeechSample, check_waveform
from omni_rewards.audio.registry import AUDIO_SCORERS, HTTP_REWARD, AudioScorerRegistry
from omni_rewards.audio.remote import AudioScoreRequest
from omni_rewards.errors import (
    AudioRewardConfigError,
    AudioRewardError,
    InvalidWaveformError,
    UnknownAudioRewardError,
)
from omni_rewards.http_client import HttpScorerClient, HttpScorerConfig
from omni_rewards.metrics import batch_metrics, report_failures
from omni_rewards.outcomes import BatchResult, SampleOutcome

METRIC_PREFIX = "audio_reward"
INVALID_WAVEFORMS = f"{METRIC_PREFIX}/invalid_waveforms"
_SPEC_KEYS = ("name", "weight", "label")


@dataclass(frozen=True)
class AudioRewardSpec:
    """One reward of a :class:`WeightedAudioReward`. Plain data."""

    name: str
    """A name in ``AUDIO_SCORERS``, or ``"http"``."""

    weight: float
    """Its factor in the sum; 0 reports the reward as a metric without paying it."""

    label: str | None = None
    """The metric key (``audio_reward/<label>``); default ``name``. Two ``"http"`` rewards
    (an ASR and a speaker-similarity service) need one each."""

    params: Mapping[str, Any] = field(default_factory=dict)
    """The scorer's keyword arguments, or ``HttpScorerConfig``'s fields for ``"http"``."""

    @property
    def key(self) -> str:
        return self.label if self.label is not None else self.name

    @classmethod
    def from_mapping(cls, spec: Mapping[str, Any]) -> AudioRewardSpec:
        """Split a flat ``{"name", "weight", "label"?, **params}`` mapping (unchecked)."""
        params = {k: v for k, v in spec.items() if k not in _SPEC_KEYS}
        name: Any = spec.get("name")  # None when missing: WeightedAudioReward reports it
        weight: Any = spec.get("weight")
        return cls(name, weight, spec.get("label"), params)


@dataclass(frozen=True)
class _Component:
    spec: AudioRewardSpec
    scorer: AudioScorer | None  # a local reward ...
    client: HttpScorerClient | None  # ... or a remote one


# A component's answer for each valid sample: its result, or what it raised.
_Answers = list[dict[str, float] | Exception]


class WeightedAudioReward:
    """``score = sum(weight_i * score_i)`` over several audio rewards, each also a metric.

    Callable as an audio scorer (one sample) and over a batch (:meth:`score_batch`). A sample
    whose waveform cannot be scored, or on which any reward fails (raises, returns no finite
    ``"score"``, or its service fails after retries), is a failed sample: never a partial sum.
    Local rewards run in the calling thread; the remote ones through their HTTP clients,
    which this object owns: close it (or use ``with``).
    """

    def __init__(
        self,
        specs: Sequence[Mapping[str, Any] | AudioRewardSpec],
        *,
        registry: AudioScorerRegistry = AUDIO_SCORERS,
        max_logged_errors: int = 5,
    ) -> None:
        """Check every spec (all problems reported together), then build the rewards.

        Raises:
            AudioRewardConfigError: an unknown name (the message lists the known ones), a
                missing, negative or NaN weight, no positive weight, a duplicate label, a
                parameter the reward does not take, or an ``"http"`` config that
                ``HttpScorerConfig`` refuses. (A local reward checks its parameters' values
                when called: a bad value fails, and is counted on, every sample.)
        """
        parsed: list[tuple[int, AudioRewardSpec]] = []  # (position in specs, spec)
        problems: list[str] = []
        for i, spec in enumerate(specs):
            if isinstance(spec, AudioRewardSpec):
                parsed.append((i, spec))
            elif isinstance(spec, Mapping):
                parsed.append((i, AudioRewardSpec.from_mapping(spec)))
            else:
                problems.append(
                    f"spec {i} must be a mapping like {{'name': 'duration', 'weight': 1.0}}, "
                    f"got {type(spec).__name__} {spec!r}"
                )
        problems += _problems(parsed, registry) if specs else [
            "no rewards: give at least one spec, e.g. {'name': 'duration', 'weight': 1.0}"
        ]
        if problems:
            raise AudioRewardConfigError(
                "Invalid audio reward specs:\n- " + "\n- ".join(problems)
            )
        self.specs = [spec for _, spec in parsed]
        self.max_logged_errors = max_logged_errors
        self._components = [
            _Component(s, None, HttpScorerClient(HttpScorerConfig(**s.params)))
            if s.name == HTTP_REWARD
            else _Component(s, registry.get(s.name), None)
            for s in self.specs
        ]

    @property
    def keys(self) -> list[str]:
        """The rewards' metric keys, in spec order."""
        return [spec.key for spec in self.specs]

    def __call__(
        self,
        waveform: NDArray[Any],
        sample_rate: int,
        text: str,
        ground_truth: str | None = None,
    ) -> dict[str, float]:
        """One sample's ``{"score": sum, "audio_reward/<key>": score, ...}``, with each
        reward's other metrics as ``"audio_reward/<key>/<metric>"``.

        Raises:
            InvalidWaveformError: the waveform cannot be scored.
            AudioRewardError: a reward failed; the message names it, the cause is chained.
        """
        checked = check_waveform(waveform, sample_rate)
        sample = SpeechSample(checked, int(sample_rate), text, ground_truth)
        answers = [self._answer(component, [sample])[0] for component in self._components]
        for component, answer in zip(self._components, answers, strict=True):
            if isinstance(answer, Exception):
                raise AudioRewardError(_failure(component.spec.key, answer)) from answer
        return self._combine([a for a in answers if not isinstance(a, Exception)])

    def score_batch(self, samples: Sequence[SpeechSample]) -> BatchResult:
        """Every sample's combined score, in input order, and the batch's metrics.

        Failed samples score 0 with status ``"error"`` and are counted, as the reward
        manager counts them (``reward/errors``, per ``data_source``); the first
        ``max_logged_errors`` messages are logged and returned. Metrics, besides
        :func:`omni_rewards.metrics.batch_metrics`' (``reward/<data_source>/audio_reward/
        <key>/mean`` over the scored samples):

        - ``audio_reward/invalid_waveforms``: samples refused before any reward ran;
        - ``audio_reward/<key>/mean``: that reward's score over the samples it scored;
        - ``audio_reward/<key>/errors``: samples on which that reward failed.
        """
        valid: list[SpeechSample] = []
        invalid: dict[int, InvalidWaveformError] = {}
        for i, sample in enumerate(samples):
            try:
                waveform = check_waveform(sample.waveform, sample.sample_rate)
            except InvalidWaveformError as exc:
                invalid[i] = exc
                continue
            valid.append(
                SpeechSample(waveform, int(sample.sample_rate), sample.text, sample.ground_truth)
            )
        answers = [self._answer(component, valid) for component in self._components]
        by_sample = iter(zip(*answers, strict=True))  # each valid sample's answers, in order
        outcomes = [
            SampleOutcome(s.data_source, "error", {"score": 0.0}, f"invalid waveform: {invalid[i]}")
            if i in invalid
            else self._outcome(s.data_source, next(by_sample))
            for i, s in enumerate(samples)
        ]
        metrics = batch_metrics(outcomes)
        metrics[INVALID_WAVEFORMS] = float(len(invalid))
        for component, component_answers in zip(self._components, answers, strict=True):
            scores = [a["score"] for a in component_answers if not isinstance(a, Exception)]
            key = f"{METRIC_PREFIX}/{component.spec.key}"
            metrics[f"{key}/errors"] = float(len(component_answers) - len(scores))
            if scores:
                metrics[f"{key}/mean"] = float(np.mean(scores))
        errors = report_failures(outcomes, self.max_logged_errors)
        return BatchResult(outcomes=outcomes, metrics=metrics, errors=errors)

    def close(self) -> None:
        """Close the remote rewards' connections."""
        for component in self._components:
            if component.client is not None:
                component.client.close()

    def __enter__(self) -> WeightedAudioReward:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _answer(self, component: _Component, samples: Sequence[SpeechSample]) -> _Answers:
        """One component's result or exception for each (checked) sample."""
        if component.client is not None:
            requests = [AudioScoreRequest.from_sample(s) for s in samples]
            return list(component.client.score_each(requests))
        assert component.scorer is not None  # one of the two is set by construction
        answers: _Answers = []
        for s in samples:
            try:
                raw = component.scorer(
                    s.waveform, s.sample_rate, s.text, s.ground_truth, **component.spec.params
                )
                answers.append(normalise_output(raw, component.scorer))
            except Exception as exc:  # a scorer's failure fails its sample, counted
                answers.append(exc)
        return answers

    def _outcome(
        self, data_source: str, answers: Sequence[Mapping[str, float] | Exception]
    ) -> SampleOutcome:
        failures = [
            _failure(component.spec.key, answer)
            for component, answer in zip(self._components, answers, strict=True)
            if isinstance(answer, Exception)
        ]
        if failures:
            return SampleOutcome(data_source, "error", {"score": 0.0}, "; ".join(failures))
        results = [answer for answer in answers if not isinstance(answer, Exception)]
        return SampleOutcome(data_source, "ok", self._combine(results))

    def _combine(self, results: Sequence[Mapping[str, float]]) -> dict[str, float]:
        combined = {"score": 0.0}
        for component, result in zip(self._components, results, strict=True):
            key = f"{METRIC_PREFIX}/{component.spec.key}"
            combined["score"] += component.spec.weight * result["score"]
            combined[key] = result["score"]
            for metric, value in result.items():
                if metric != "score":
                    combined[f"{key}/{metric}"] = value
        return combined


def _failure(key: str, exc: Exception) -> str:
    return f"audio reward {key!r} failed: {type(exc).__name__}: {exc}"


def _problems(
    specs: Sequence[tuple[int, AudioRewardSpec]], registry: AudioScorerRegistry
) -> list[str]:
    """Every problem with ``specs`` (each with its position), each saying how to fix it."""
    problems: list[str] = []
    seen: dict[str, int] = {}
    for i, spec in specs:
        where = f"spec {i} ({spec.name!r})"
        if not isinstance(spec.name, str) or not spec.name:
            problems.append(f"spec {i}: 'name' is required, one of {', '.join(registry.names())}")
            continue
        weight = spec.weight
        if weight is None:
            problems.append(f"{where}: 'weight' is required, e.g. 'weight': 1.0")
        elif isinstance(weight, bool) or not isinstance(weight, Real):
            problems.append(f"{where}: weight must be a number, got {weight!r}")
        elif not (math.isfinite(weight) and weight >= 0):
            problems.append(f"{where}: weight must be finite and >= 0, got {weight!r}")
        if spec.label is not None and (not isinstance(spec.label, str) or not spec.label):
            problems.append(f"{where}: label must be a non-empty string, got {spec.label!r}")
        if spec.key in seen:
            problems.append(
                f"{where}: reports as {spec.key!r}, as spec {seen[spec.key]} does; give each a "
                "distinct 'label'"
            )
        seen.setdefault(spec.key, i)
        problems.extend(f"{where}: {p}" for p in _parameter_problems(spec, registry))
    weights = [s.weight for _, s in specs if isinstance(s.weight, Real)]
    if not problems and not any(w > 0 for w in weights):
        problems.append("every weight is 0: give at least one reward a positive weight")
    return problems


def _parameter_problems(spec: AudioRewardSpec, registry: AudioScorerRegistry) -> list[str]:
    if spec.name == HTTP_REWARD:
        try:
            HttpScorerConfig(**spec.params)
        except TypeError as exc:
            fields = ", ".join(HttpScorerConfig.__dataclass_fields__)
            return [f"{exc}; an 'http' reward takes: {fields} (url required)"]
        except ValueError as exc:
            return [str(exc)]
        return []
    try:
        scorer = registry.get(spec.name)
    except UnknownAudioRewardError as exc:
        return [str(exc)]
    try:
        signature = inspect.signature(scorer)
    except (TypeError, ValueError):
        return []  # a builtin or C callable: its parameters are checked on the first call
    try:
        signature.bind(np.zeros(1, np.float32), 1, "", None, **spec.params)
    except TypeError as exc:
        takes = [
            p.name for p in list(signature.parameters.values())[4:] if p.kind is p.KEYWORD_ONLY
        ]
        return [f"{exc}; {spec.name!r} takes: {', '.join(takes) or 'no parameters'}"]
    return []
