"""Scorers by ``data_source``: a registry that refuses bad entries and explains its misses."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from omni_contracts import Registry
from omni_rewards.errors import ScorerRegistrationError, UnknownDataSourceError


Scorer = Callable[..., Mapping[str, float] | float]
"""Scores one response: ``scorer(solution_str, ground_truth, extra_info=None, **kwargs)``.

Returns a mapping with a ``"score"`` and any named sub-metrics (numbers), or a bare number.
Scorers run in the reward manager's worker processes, so a scorer registered by a user must
be a module-level function (picklable by reference).
"""


class ScorerRegistry(Registry[str, Scorer]):
    """Maps a ``data_source`` string to its scorer.

    Subclasses that hold scorers of another call shape (``omni_rewards.audio``) override the
    class attributes below, which only shape the messages, and :meth:`_miss_message`.
    """

    key_name = "data_source"
    """What a key is, for messages."""
    call_shape = "scorer(solution_str, ground_truth, extra_info=None, **kwargs)"
    """How a registered scorer is called, for messages."""
    miss_error: type[Exception] = UnknownDataSourceError
    """Raised on a lookup miss."""
    duplicate_error: type[Exception] = ScorerRegistrationError

    def __init__(self) -> None:
        super().__init__("reward scorer")

    def add(self, data_sources: str | Iterable[str], scorer: Scorer) -> None:
        """Register ``scorer`` for one or several data sources (all or none of them).

        Raises:
            ScorerRegistrationError: ``scorer`` is not callable, a key is empty, or another
                scorer already holds a key.
        """
        keys = [data_sources] if isinstance(data_sources, str) else list(data_sources)
        if not callable(scorer):
            raise ScorerRegistrationError(
                f"Cannot register {scorer!r} for {keys}: a scorer must be callable as "
                f"{self.call_shape}."
            )
        if not keys or any(not isinstance(k, str) or not k for k in keys):
            raise ScorerRegistrationError(
                f"Cannot register {_name(scorer)} under {keys!r}: {self.key_name} keys "
                "must be non-empty strings."
            )
        with self._lock:
            for key in keys:
                holder = self._entries.get(key)
                if holder is not None and holder is not scorer:
                    raise ScorerRegistrationError(self._duplicate_message(key, scorer, holder))
            for key in keys:
                self._entries[key] = scorer

    def register(self, *data_sources: str) -> Callable[[Scorer], Scorer]:
        """Decorator form of :meth:`add`: ``@SCORERS.register("my_dataset")``."""

        def decorate(scorer: Scorer) -> Scorer:
            self.add(data_sources, scorer)
            return scorer

        return decorate

    def remove(self, data_source: str) -> None:
        """Unregister ``data_source``; a miss raises :attr:`miss_error`."""
        with self._lock:
            if data_source not in self._entries:
                raise self.miss_error(self._miss_message(data_source))
            del self._entries[data_source]

    def keys(self) -> list[str]:
        """Registered data sources, sorted."""
        return sorted(self._entries)

    def _duplicate_message(self, key: str, item: Scorer, holder: Scorer) -> str:
        return (
            f"Duplicate scorer for {self.key_name} {key!r}: {_name(item)} cannot "
            f"replace {_name(holder)}, which is already registered. Remove it "
            f"first (registry.remove) or register under another {self.key_name}."
        )

    def _miss_message(self, data_source: str) -> str:
        return (
            f"No reward scorer is registered for data_source {data_source!r}. "
            f"Registered: {', '.join(self.keys()) or 'none'}. Register one with "
            "omni_rewards.SCORERS.add(data_source, scorer), or fix the dataset's "
            "data_source column."
        )


def _name(scorer: object) -> str:
    module = getattr(scorer, "__module__", None)
    qualname = getattr(scorer, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else repr(scorer)


SCORERS = ScorerRegistry()
"""The default registry; the built-in scorers register here when omni_rewards is imported."""
