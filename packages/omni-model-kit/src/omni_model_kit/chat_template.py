"""The chat template of a checkpoint: the ChatML template a tiny checkpoint ships, and the
fallback that reads it from beside the tokenizer.

Qwen-Omni checkpoints keep the template in ``chat_template.json`` (or
``chat_template.jinja``) rather than in ``tokenizer_config.json``; a tokenizer loaded from
such a checkpoint has none, and the dataset needs one for every prompt. Training adapters'
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


def chatml_template(*, image: str, audio: str, video: str) -> str:
    """The ChatML chat template with the given placeholder for each medium.

    A message's content is a string or a list of parts: ``{"type": "text", "text": ...}``,
    ``{"type": "image"|"image_url", ...}``, ``{"type": "audio"|"audio_url", ...}`` or
    ``{"type": "video"|"video_url", ...}``. Each media part becomes its placeholder, e.g.
    ``"<|vision_start|><|image_pad|><|vision_end|>"``: start token, one pad token (the
    processor expands it to the medium's length), end token. Other part types raise.
    """
    return (
        "{%- for message in messages -%}"
        "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
        "{%- if message['content'] is string -%}"
        "{{- message['content'] -}}"
        "{%- else -%}"
        "{%- for part in message['content'] -%}"
        "{%- if part['type'] == 'text' -%}{{- part['text'] -}}"
        "{%- elif part['type'] in ('image', 'image_url') -%}"
        f"{{{{- '{image}' -}}}}"
        "{%- elif part['type'] in ('audio', 'audio_url') -%}"
        f"{{{{- '{audio}' -}}}}"
        "{%- elif part['type'] in ('video', 'video_url') -%}"
        f"{{{{- '{video}' -}}}}"
        "{%- else -%}"
        "{{- raise_exception('Unknown content part type: ' + part['type']) -}}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- endif -%}"
        "{{- '<|im_end|>\\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )


__all__ = ["TEMPLATE_FILES", "chatml_template", "load_chat_template"]
