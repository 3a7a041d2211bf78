"""Build a complete, tiny Qwen2.5-Omni checkpoint offline: config, weights, speaker table,
tokenizer, chat template and processor, loadable with ``from_pretrained``.

The checkpoint is the full ``Qwen2_5OmniForConditionalGeneration`` (thinker, talker and
token2wav), so stripping and adapter code see the real structure. Everything is derived
from the model kit's :class:`~omni_model_kit.tiny.TinySpec` and a seed; a build is cached
under a hash of both (and the transformers version; :func:`omni_model_kit.tiny.build_tiny`).

CLI: ``python -m omni_qwen25.tiny --out DIR [--seed N]`` (prints the directory).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_model_kit import tiny as kit

from omni_qwen25.tiny.chat_template import CHAT_TEMPLATE

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

BUILDER_VERSION = 2  # bump whenever the written checkpoint changes for the same spec and seed
FAMILY = "tiny-qwen2.5-omni"
PATCH_SIZE = 14  # the vision encoder's and the processor's
TTS_TEXT_ROWS = 3
"""Thinker embedding rows past the tokenizer for the talker's tts text start/end/pad ids
(Qwen2.5-Omni-7B: 151860/151861/151859, rows without a token string, as here)."""


def build_tiny_qwen25_omni(
    out_dir: str | Path | None = None, *, seed: int = 0, spec: kit.TinySpec | None = None
) -> Path:
    """Write (or reuse) a tiny Qwen2.5-Omni checkpoint (a dense thinker: Qwen2.5-Omni has no
    MoE) and return its directory; the arguments are :func:`omni_model_kit.tiny.build_tiny`'s."""
    return kit.build_tiny(FAMILY, spec or kit.TinySpec(), seed, BUILDER_VERSION, _write_checkpoint, out_dir)


def _write_checkpoint(out: Path, spec: kit.TinySpec, seed: int) -> None:
    from transformers import Qwen2_5OmniForConditionalGeneration, Qwen2_5OmniProcessor

    from omni_qwen25.tiny.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(spec.vocab_size)
    tokenizer.chat_template = CHAT_TEMPLATE
    model = kit.seeded_model(Qwen2_5OmniForConditionalGeneration, tiny_config(spec, tokenizer), seed)
    processor = kit.qwen_processor(Qwen2_5OmniProcessor, tokenizer, CHAT_TEMPLATE, PATCH_SIZE)
    kit.save_checkpoint(out, model, processor, tokenizer, CHAT_TEMPLATE)
    _write_speakers(out, model.config, seed)


TOKENS = {
    "image": "<|IMAGE|>", "video": "<|VIDEO|>", "audio": "<|AUDIO|>", "vision_start": "<|vision_bos|>",
    "vision_end": "<|vision_eos|>", "audio_start": "<|audio_bos|>", "audio_end": "<|audio_eos|>",
    "im_end": "<|im_end|>", "pad": "<|endoftext|>", "user": "user",
}
"""The texts whose ids the config needs (:func:`omni_model_kit.tiny.single_token_ids`)."""


def tiny_config(spec: kit.TinySpec, tokenizer: PreTrainedTokenizerBase) -> Any:
    """A real ``Qwen2_5OmniConfig`` with tiny sizes and every token id from ``tokenizer``."""
    from transformers import Qwen2_5OmniConfig

    ids = kit.single_token_ids(tokenizer, TOKENS)
    tts_pad, tts_start, tts_end = (len(tokenizer) + row for row in range(TTS_TEXT_ROWS))
    rope = kit.mrope(spec)
    media_ids = {
        "audio_token_index": ids["audio"],
        "image_token_index": ids["image"],
        "video_token_index": ids["video"],
        "audio_start_token_id": ids["audio_start"],
        "audio_end_token_id": ids["audio_end"],
        "vision_start_token_id": ids["vision_start"],
        "vision_end_token_id": ids["vision_end"],
        "position_id_per_seconds": 25,
        "seconds_per_chunk": 2,
    }
    thinker = {
        "text_config": kit.text_config(spec, len(tokenizer) + TTS_TEXT_ROWS, ids, rope),
        **kit.encoder_configs(
            spec, PATCH_SIZE,
            vision={"window_size": 56, "fullatt_block_indexes": [spec.vision_depth - 1]},
            audio={"n_window": 100},
        ),
        "user_token_id": ids["user"],
        **media_ids,
    }
    codec = spec.codec_vocab_size
    talker = {
        **kit.talker_decoder(spec),
        "embedding_size": spec.text_hidden_size,
        "rope_parameters": {**rope, "mrope_section": kit.mrope_section(spec.talker_head_dim)},
        "tts_text_start_token_id": tts_start,
        "tts_text_end_token_id": tts_end,
        "tts_text_pad_token_id": tts_pad,
        "tts_codec_start_token_id": codec - 4,
        "tts_codec_end_token_id": codec - 3,
        "tts_codec_pad_token_id": codec - 2,
        "tts_codec_mask_token_id": codec - 1,
        "spatial_merge_size": 2,
        **media_ids,
    }
    token2wav = {
        "dit_config": {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "head_dim": 16,
            "emb_dim": 16,
            "num_embeds": codec,
            "mel_dim": 80,
            "look_ahead_layers": [1],
            "look_backward_layers": [0],
            "enc_emb_dim": 16,
            "enc_dim": 16,
            "enc_channels": [32, 32, 32, 32, 48],
            "enc_attention_channels": 8,
            "enc_se_channels": 8,
        },
        "bigvgan_config": {
            "mel_dim": 80,
            "upsample_initial_channel": 32,
            "resblock_kernel_sizes": [3],
            "resblock_dilation_sizes": [[1, 3, 5]],
            "upsample_rates": [2, 2],
            "upsample_kernel_sizes": [4, 4],
        },
    }
    return Qwen2_5OmniConfig(
        thinker_config=thinker, talker_config=talker, token2wav_config=token2wav, enable_audio_output=True
    )


def _write_speakers(out: Path, config: Any, seed: int) -> None:
    """``spk_dict.pt``: ``from_pretrained`` of the full model refuses a checkpoint without
    it. One speaker with seeded conditioning and reference mel of the token2wav's sizes."""
    import torch

    dit = config.token2wav_config.dit_config
    generator = torch.Generator().manual_seed(seed)
    speakers = {
        "Tiny": {
            "cond": torch.randn(1, dit.enc_emb_dim, generator=generator),
            "ref_mel": torch.randn(1, 32, dit.mel_dim, generator=generator),
            "bos_token": config.talker_config.tts_codec_start_token_id,
        }
    }
    torch.save(speakers, out / "spk_dict.pt")
