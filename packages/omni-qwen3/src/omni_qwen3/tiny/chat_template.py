"""The ChatML chat template with Qwen3-Omni's multimodal placeholders.

A message's content is a string or a list of parts: ``{"type": "text", "text": ...}``,
``{"type": "image", ...}``, ``{"type": "audio", ...}`` or ``{"type": "video", ...}``. Each
media part becomes its start token, one pad token (the processor expands it to the media's
length) and its end token (see :func:`omni_contracts.tiny.chatml_template`).
"""

from omni_contracts.tiny import chatml_template

CHAT_TEMPLATE = chatml_template(
    image="<|vision_start|><|image_pad|><|vision_end|>",
    audio="<|audio_start|><|audio_pad|><|audio_end|>",
    video="<|vision_start|><|video_pad|><|vision_end|>",
)
