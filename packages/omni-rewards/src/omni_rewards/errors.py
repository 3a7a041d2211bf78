"""Exceptions raised by omni_rewards.

Every message says what was wrong and what to do about it; tests check the text.
"""

from __future__ import annotations


class RewardError(Exception):
    """Base class for every error omni_rewards raises."""


class ScorerRegistrationError(RewardError):
    """A scorer cannot be registered (not callable, empty key, or a duplicate key)."""


class UnknownDataSourceError(RewardError, LookupError):
    """No scorer is registered for a sample's ``data_source``."""


class ScorerOutputError(RewardError, ValueError):
    """A scorer returned something that is not a score (no ``"score"``, not a number, NaN)."""


class RewardWorkerError(RewardError, RuntimeError):
    """The reward worker processes could not be started or used."""


class RemoteScorerError(RewardError, RuntimeError):
    """The remote (HTTP) scorer failed after its retries, or answered malformed JSON."""
