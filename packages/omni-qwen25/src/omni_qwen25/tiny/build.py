"""Build a complete, tiny Qwen2.5-Omni checkpoint offline: config, weights, speaker table,
tokenizer, chat template and processor, loadable with ``from_pretrained``.

The checkpoint is the full ``Qwen2_5OmniForConditionalGeneration`` (thinker, talker and
token2wav), so stripping and adapter code see the real structure. Everything is derived
from :class:`TinySpec` and a seed; a build is cached under a hash of both (and the
transformers version; :func:`omni_contracts.tiny.cached_build`).

CLI: ``python -m omni_qwen25.tiny --out DIR [--seed N]`` (prints the directory).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_contracts.tiny import cached_build

from omni_qwen25.tiny.chat_template import CHAT_TEMPLATE

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

BUILDER_VERSION = 1  # bump whenever the written checkpoint changes for the same spec and seed
FAMILY = "tiny-qwen2.5-omni"
TTS_TEXT_ROWS = 3
"""Thinker embedding rows past the tokenizer for the talker's tts text start/end/pad ids
(Qwen2.5-Omni-7B: 151860/151861/151859, rows without a token string, as here)."""


@dataclass(frozen=True)
class TinySpec:
    """Sizes of the tiny model (a dense thinker: Qwen2.5-Omni has no MoE)."""

    vocab_size: int = 4096
    text_hidden_size: int = 64
    text_layers: int = 2
    text_heads: int = 4
    text_kv_heads: int = 2
    vision_hidden_size: int = 32
    vision_depth: int = 2
    audio_hidden_size: int = 32
    audio_layers: int = 2
    talker_hidden_size: int = 32
    codec_vocab_size: int = 64


def build_tiny_qwen25_omni(
    out_dir: str | Path | None = None, *, seed: int = 0, spec: TinySpec | None = None
) -> Path:
    """Write (or reuse) a tiny Qwen2.5-Omni checkpoint and return its directory.

    Args:
        out_dir: where to write it; default ``<cache>/tiny-qwen2.5-omni/<hash>``. An
            existing directory built from the same spec and seed is reused; one built from
            another is an error (delete it or choose another directory).
        seed: seeds the weights (the tokenizer corpus is fixed).
        spec: model sizes.
    """
    spec = spec or TinySpec()
    settings = {"spec": dataclasses.asdict(spec), "seed": seed, "builder": BUILDER_VERSION}
    return cached_build(FAMILY, settings, lambda staging: _write_checkpoint(staging, spec, seed), out_dir)


def _write_checkpoint(out: Path, spec: TinySpec, seed: int) -> None:
    from omni_qwen25.tiny.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(spec.vocab_size)
    tokenizer.chat_template = CHAT_TEMPLATE
    model = _build_model(spec, tokenizer, seed)
    model.save_pretrained(out)
    _write_speakers(out, model.config, seed)
    _build_processor(tokenizer).save_pretrained(out)
    tokenizer.save_pretrained(out)
    # Shipped beside the tokenizer; the tokenizer config carries none, so loaders must
    # fall back to this file (as for real Qwen-Omni checkpoints).
    (out / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}, indent=2))
    _drop_template_from_tokenizer_config(out)


def _drop_template_from_tokenizer_config(out: Path) -> None:
    path = out / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config.pop("chat_template", None)
    path.write_text(json.dumps(config, indent=2))
    jinja = out / "chat_template.jinja"
    if jinja.exists():
        jinja.unlink()


def token_ids(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """The ids of every special token the configs need, read from ``tokenizer``."""

    def single(text: str) -> int:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"The tiny tokenizer splits {text!r} into {ids}; it must be one token.")
        return int(ids[0])

    return {
        "image": single("<|IMAGE|>"),
        "video": single("<|VIDEO|>"),
        "audio": single("<|AUDIO|>"),
        "vision_start": single("<|vision_bos|>"),
        "vision_end": single("<|vision_eos|>"),
        "audio_start": single("<|audio_bos|>"),
        "audio_end": single("<|audio_eos|>"),
        "im_end": single("<|im_end|>"),
        "pad": single("<|endoftext|>"),
        "user": single("user"),
    }


def tiny_config(spec: TinySpec, tokenizer: PreTrainedTokenizerBase) -> Any:
    """A real ``Qwen2_5OmniConfig`` with tiny sizes and every token id from ``tokenizer``."""
    from transformers import Qwen2_5OmniConfig

    ids = token_ids(tokenizer)
    tts_pad, tts_start, tts_end = (len(tokenizer) + row for row in range(TTS_TEXT_ROWS))
    hidden = spec.text_hidden_size
    head_dim = hidden // spec.text_heads
    rope = {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [head_dim // 4, head_dim // 8, head_dim // 8]}
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
        "text_config": {
            "vocab_size": len(tokenizer) + TTS_TEXT_ROWS,
            "hidden_size": hidden,
            "intermediate_size": 2 * hidden,
            "num_hidden_layers": spec.text_layers,
            "num_attention_heads": spec.text_heads,
            "num_key_value_heads": spec.text_kv_heads,
            "max_position_embeddings": 4096,
            "rope_parameters": rope,
            "pad_token_id": ids["pad"],
            "eos_token_id": ids["im_end"],
            "tie_word_embeddings": False,
        },
        "vision_config": {
            "depth": spec.vision_depth,
            "hidden_size": spec.vision_hidden_size,
            "intermediate_size": 2 * spec.vision_hidden_size,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "window_size": 56,
            "out_hidden_size": hidden,
            "fullatt_block_indexes": [spec.vision_depth - 1],
        },
        "audio_config": {
            "num_mel_bins": 128,
            "encoder_layers": spec.audio_layers,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 2 * spec.audio_hidden_size,
            "d_model": spec.audio_hidden_size,
            "output_dim": hidden,
            "n_window": 100,
            "max_source_positions": 1500,
        },
        "user_token_id": ids["user"],
        **media_ids,
    }
    codec = spec.codec_vocab_size
    talker_hidden = spec.talker_hidden_size
    talker = {
        "vocab_size": codec,
        "embedding_size": hidden,
        "hidden_size": talker_hidden,
        "intermediate_size": 2 * talker_hidden,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": talker_hidden // 2,
        "rope_parameters": {**rope, "mrope_section": [4, 2, 2]},
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


def _build_model(spec: TinySpec, tokenizer: PreTrainedTokenizerBase, seed: int) -> Any:
    import torch
    from transformers import Qwen2_5OmniForConditionalGeneration

    config = tiny_config(spec, tokenizer)
    config.architectures = ["Qwen2_5OmniForConditionalGeneration"]
    torch.manual_seed(seed)
    return Qwen2_5OmniForConditionalGeneration(config).eval()


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


def _build_processor(tokenizer: PreTrainedTokenizerBase) -> Any:
    from transformers import Qwen2_5OmniProcessor, WhisperFeatureExtractor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    pixels = {"min_pixels": 28 * 28, "max_pixels": 112 * 112}
    vision = {"patch_size": 14, "temporal_patch_size": 2, "merge_size": 2}
    return Qwen2_5OmniProcessor(
        image_processor=Qwen2VLImageProcessor(**vision, **pixels),
        video_processor=Qwen2VLVideoProcessor(**vision, **pixels),
        feature_extractor=WhisperFeatureExtractor(feature_size=128, sampling_rate=16000),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
