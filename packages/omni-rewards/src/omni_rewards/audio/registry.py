"""Audio rewards by name, for the ``name`` of a reward spec (:class:`WeightedAudioReward`)."""

from __future__ import annotations

from collections.abc import Iterable

from omni_rewards.audio.api import AudioScorer
from omni_rewards.errors import ScorerRegistrationError, UnknownAudioRewardError
from omni_rewards.registry import ScorerRegistry

HTTP_REWARD = "http"
"""The spec name of a remote reward (:class:`omni_rewards.HttpScorerClient`); reserved."""


class AudioScorerRegistry(ScorerRegistry):
    """Maps a reward name (``"duration"``, ``"my_wer"``) to an audio scorer.

    Refuses non-callables, empty names, a second scorer under a taken name, and the reserved
    name ``"http"``; a miss lists the registered names.
    """

    key_name = "audio reward name"
    call_shape = "scorer(waveform, sample_rate, text, ground_truth=None, **kwargs)"
    miss_error = UnknownAudioRewardError

    def add(self, data_sources: str | Iterable[str], scorer: AudioScorer) -> None:
        """Register ``scorer`` under one or several names (see :meth:`ScorerRegistry.add`).

        Raises:
            ScorerRegistrationError: as :meth:`ScorerRegistry.add`, or a name is ``"http"``.
        """
        names = [data_sources] if isinstance(data_sources, str) else list(data_sources)
        if HTTP_REWARD in names:
            raise ScorerRegistrationError(
                f"Cannot register an audio reward named {HTTP_REWARD!r}: the name is reserved "
                "for remote rewards (a spec with a url). Choose another name."
            )
        super().add(names, scorer)

    def names(self) -> list[str]:
        """Every name a reward spec may use: the registered ones and ``"http"``, sorted."""
        return sorted([*self.keys(), HTTP_REWARD])

    def _miss_message(self, data_source: str) -> str:
        return (
            f"No audio reward is named {data_source!r}. Known: {', '.join(self.names())}. "
            "Fix the spec's name, or register a scorer with "
            "omni_rewards.AUDIO_SCORERS.add(name, scorer)."
        )


AUDIO_SCORERS = AudioScorerRegistry()
"""The default audio registry; the signal-level rewards register here on import."""
