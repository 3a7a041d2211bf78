"""The docs tests share ``docs_source.py`` (this folder is not a package; pytest imports tests by
path), and skip without the ``docs`` dependency group outside CI, as extras do (the root conftest
fails such a skip in CI)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
