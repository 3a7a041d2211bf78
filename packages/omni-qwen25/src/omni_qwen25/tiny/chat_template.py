"""The ChatML chat template with Qwen2.5-Omni's multimodal placeholders
(``<|vision_bos|><|IMAGE|><|vision_eos|>``, ``<|audio_bos|><|AUDIO|><|audio_eos|>``,
``<|vision_bos|><|VIDEO|><|vision_eos|>``; see :func:`omni_model_kit.chat_template.chatml_template`).
"""

from omni_qwen25.tiny.tokenizer import MEDIA

CHAT_TEMPLATE = MEDIA.chat_template()
