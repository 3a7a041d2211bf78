"""A tiny Qwen3-Omni checkpoint laid out as verl-omni's own
``tests/special_e2e/build_qwen3_omni_tiny_random.py`` writes it, from this workspace's offline
pieces (omni-qwen3's tiny BPE), for the tests that train it.

What that builder writes, read from its source and from one of its outputs:

- ``config.json``: transformers' default ``Qwen3OmniMoeConfig`` with the thinker shrunk and
  ``enable_audio_output`` false, so only the thinker is built and saved. The only ids taken
  from the tokenizer are the text config's bos/eos/pad; the thinker keeps the class defaults
  for its media ids (151646, 151655, 151656; outside the small vocabulary) and has no
  ``vision_start_token_id`` at all: that id is in ``talker_config`` only (its default, 151652).
- a small ChatML BPE whose bos is ``<|im_start|>``, with the multimodal tokens named on the
  tokenizer (``image_token``, ``vision_bos_token``, ...);
- the processor (``processor_config.json``), ``tokenizer.json``, ``tokenizer_config.json``,
  and the chat template twice: ``chat_template.jinja`` (from the processor) and
  ``chat_template.json``. The template takes string contents only (text rows).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CHATML_TEXT_ONLY = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_verl_omni_layout(out: Path, *, seed: int = 0) -> Path:
    """Write the checkpoint into ``out`` (returned)."""
    import torch
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

    from omni_qwen3.tiny.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(512)
    tokenizer.bos_token = "<|im_start|>"
    tokenizer.chat_template = CHATML_TEXT_ONLY
    config = Qwen3OmniMoeConfig()
    config.enable_audio_output = False
    _shrink(config.thinker_config, vocab=len(tokenizer))
    text = config.thinker_config.text_config
    text.bos_token_id, text.eos_token_id, text.pad_token_id = (
        tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)
    torch.manual_seed(seed)
    model = Qwen3OmniMoeForConditionalGeneration(config)
    with torch.no_grad():  # fused expert weights start as torch.empty: give them values
        for module in model.modules():
            if type(module).__name__.endswith("Experts"):
                for param in module.parameters(recurse=False):
                    param.normal_(0.0, 0.02)
    model.save_pretrained(out)
    _processor(tokenizer).save_pretrained(out)
    (out / "chat_template.json").write_text(json.dumps({"chat_template": CHATML_TEXT_ONLY}))
    return out


def _shrink(thinker: Any, *, vocab: int) -> None:
    text = thinker.text_config
    text.tie_word_embeddings = False
    text.vocab_size = vocab
    text.num_hidden_layers, text.hidden_size, text.intermediate_size = 2, 64, 128
    text.num_attention_heads, text.num_key_value_heads, text.head_dim = 4, 2, 16
    text.num_experts, text.num_experts_per_tok, text.moe_intermediate_size = 4, 2, 64
    text.rope_parameters = {"rope_theta": 1_000_000.0, "rope_type": "default", "mrope_section": [4, 2, 2]}
    vision = thinker.vision_config
    vision.depth, vision.hidden_size, vision.intermediate_size, vision.num_heads = 2, 32, 64, 2
    vision.out_hidden_size, vision.patch_size, vision.spatial_merge_size = 64, 16, 2
    vision.temporal_patch_size, vision.num_position_embeddings, vision.deepstack_visual_indexes = 2, 256, [0]
    audio = thinker.audio_config
    audio.encoder_layers = audio.num_hidden_layers = 2
    audio.d_model, audio.encoder_attention_heads, audio.encoder_ffn_dim = 32, 2, 64
    audio.num_mel_bins, audio.output_dim, audio.downsample_hidden_size = 128, 64, 16


def _processor(tokenizer: Any) -> Any:
    from transformers import Qwen3OmniMoeProcessor, WhisperFeatureExtractor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    vision = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2}
    return Qwen3OmniMoeProcessor(
        image_processor=Qwen2VLImageProcessor(**vision), video_processor=Qwen2VLVideoProcessor(**vision),
        feature_extractor=WhisperFeatureExtractor(), tokenizer=tokenizer, chat_template=CHATML_TEXT_ONLY,
    )
