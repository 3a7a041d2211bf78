"""Exceptions raised by omni_data. Messages name the row and the file; tests check the text."""

from __future__ import annotations


class OmniDataError(Exception):
    """Base class for every error omni_data raises."""


class InputFormatError(OmniDataError, ValueError):
    """A raw input file (converter input) is missing, unreadable or has the wrong columns."""


class RowError(OmniDataError, ValueError):
    """One RL parquet row is malformed (wrong column type, placeholder/media mismatch).

    ``reason`` is a short stable tag (``bad_prompt``, ``media_count_mismatch``, ...) under
    which the row is counted when the dataset is told to skip bad rows.
    """

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class MediaError(RowError):
    """A row's image, audio or video cannot be read or decoded."""
