"""The stop request a verl run's ``trainer`` process hands its trainer, in a Ray actor that may
be on another machine: a file in the run directory (which every node of a run shares, for its
checkpoints). Written on the first Ctrl-C during training, read at each step's end by
:class:`omni_verl.trainer.OmniSyncTrainer`, removed at each launch."""

from __future__ import annotations

import os
from pathlib import Path

STOP_FILE = ".stop-requested"


def stop_file(run_dir: str | Path) -> Path:
    """The stop request's path for ``run_dir`` (relative: from the current directory, as verl
    resolves ``trainer.default_local_dir``)."""
    return Path(os.path.abspath(run_dir)) / STOP_FILE
