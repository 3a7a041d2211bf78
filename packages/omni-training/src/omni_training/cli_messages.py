"""How the package's command lines report a user's mistake: one line, no traceback."""

from __future__ import annotations


def one_line(exc: BaseException) -> str:
    """``exc`` as one line for ``error: ...`` (an ``OSError`` names its file)."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        return f"{exc.strerror}: {exc.filename}"
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    return lines[0] if len(lines) == 1 else f"{lines[0]} ..."
