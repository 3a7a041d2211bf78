"""The ChatML chat template with Qwen2.5-Omni's multimodal placeholders
(``<|vision_bos|><|IMAGE|><|vision_eos|>``, ``<|audio_bos|><|AUDIO|><|audio_eos|>``,
``<|vision_bos|><|VIDEO|><|vision_eos|>``; see :func:`omni_contracts.tiny.chatml_template`).
"""

from omni_contracts.tiny import chatml_template

CHAT_TEMPLATE = chatml_template(
    image="<|vision_bos|><|IMAGE|><|vision_eos|>",
    audio="<|audio_bos|><|AUDIO|><|audio_eos|>",
    video="<|vision_bos|><|VIDEO|><|vision_eos|>",
)
