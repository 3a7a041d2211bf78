"""The ChatML chat template with Qwen3-Omni's multimodal placeholders.

A message's content is a string or a list of parts: ``{"type": "text", "text": ...}``,
``{"type": "image", ...}``, ``{"type": "audio", ...}`` or ``{"type": "video", ...}``. Each
media part becomes its start token, one pad token (the processor expands it to the media's
length) and its end token (see :func:`omni_model_kit.chat_template.chatml_template`).
"""

from omni_qwen3.tiny.tokenizer import MEDIA

CHAT_TEMPLATE = MEDIA.chat_template()
