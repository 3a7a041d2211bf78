"""The chat template a checkpoint ships beside its tokenizer.

Qwen-Omni checkpoints keep the template in ``chat_template.json`` (or
``chat_template.jinja``) rather than in ``tokenizer_config.json``; a tokenizer loaded from
such a checkpoint has none, and the dataset needs one for every prompt. Model packages'
``configure_tokenizer`` hooks fall back to :func:`load_chat_template`.
"""

from __future__ import annotations

import json
from pathlib import Path

from omni_contracts.errors import CheckpointFileNotFoundError

TEMPLATE_FILES = ("chat_template.json", "chat_template.jinja")


def load_chat_template(model_path: str | Path) -> str:
    """The chat template shipped beside the tokenizer (``chat_template.json`` or ``.jinja``).

    Raises:
        CheckpointFileNotFoundError: neither file exists (a ``FileNotFoundError`` and a user
            error: the trainer exits with status 2); the message names what was looked for.
    """
    path = Path(model_path)
    json_file = path / "chat_template.json"
    if json_file.is_file():
        template = json.loads(json_file.read_text()).get("chat_template")
        if template:
            return str(template)
    jinja_file = path / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text()
    raise CheckpointFileNotFoundError(
        f"No chat template for the checkpoint at {path}: tokenizer_config.json has no "
        f"'chat_template', and neither {' nor '.join(TEMPLATE_FILES)} exists there (or it is "
        "empty). Copy the model's chat_template.json into the checkpoint directory."
    )


__all__ = ["TEMPLATE_FILES", "load_chat_template"]
