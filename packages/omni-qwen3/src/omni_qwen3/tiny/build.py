"""Build a complete, tiny Qwen3-Omni checkpoint offline: config, weights, tokenizer,
chat template and processor, loadable with ``from_pretrained``.

The checkpoint is the full ``Qwen3OmniMoeForConditionalGeneration`` (thinker, talker and
code2wav), so stripping and adapter code see the real structure. Everything is derived
from :class:`TinySpec` and a seed; a build is cached under a hash of both (and the
transformers version), so repeated calls return the same directory at once.

CLI: ``python -m omni_qwen3.tiny --out DIR [--seed N]`` (prints the directory).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_contracts.tiny import cached_build, default_cache_dir

from omni_qwen3.tiny.chat_template import CHAT_TEMPLATE

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

BUILDER_VERSION = 1  # bump whenever the written checkpoint changes for the same spec and seed


@dataclass(frozen=True)
class TinySpec:
    """Sizes of the tiny model. The defaults run a GRPO step on a laptop CPU in well under
    a second; with a 4k vocabulary the embeddings no longer dominate the parameters."""

    vocab_size: int = 4096
    text_hidden_size: int = 64
    text_layers: int = 2
    text_heads: int = 4
    text_kv_heads: int = 2
    num_experts: int = 4
    experts_per_token: int = 2
    moe_intermediate_size: int = 64
    vision_hidden_size: int = 32
    vision_depth: int = 2
    audio_hidden_size: int = 32
    audio_layers: int = 2
    talker_hidden_size: int = 32
    codec_vocab_size: int = 64
    code_groups: int = 4


def build_tiny_qwen3_omni(
    out_dir: str | Path | None = None, *, seed: int = 0, spec: TinySpec | None = None
) -> Path:
    """Write (or reuse) a tiny Qwen3-Omni checkpoint and return its directory.

    Args:
        out_dir: where to write it; default ``<cache>/tiny-qwen3-omni/<hash>``. An existing
            directory built from the same spec and seed is reused; one built from another
            is an error (delete it or choose another directory).
        seed: seeds the weights (the tokenizer corpus is fixed).
        spec: model sizes.
    """
    spec = spec or TinySpec()
    settings = {"spec": dataclasses.asdict(spec), "seed": seed, "builder": BUILDER_VERSION}
    return cached_build(
        "tiny-qwen3-omni", settings, lambda staging: _write_checkpoint(staging, spec, seed), out_dir
    )


def _write_checkpoint(out: Path, spec: TinySpec, seed: int) -> None:
    from omni_qwen3.tiny.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(spec.vocab_size)
    tokenizer.chat_template = CHAT_TEMPLATE
    model = _build_model(spec, tokenizer, seed)
    model.save_pretrained(out)
    processor = _build_processor(tokenizer)
    processor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # The template ships beside the tokenizer, as Qwen3-Omni checkpoints do; the
    # tokenizer config itself carries none, so loaders must fall back to this file.
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
        "image": single("<|image_pad|>"),
        "video": single("<|video_pad|>"),
        "audio": single("<|audio_pad|>"),
        "vision_start": single("<|vision_start|>"),
        "audio_start": single("<|audio_start|>"),
        "im_start": single("<|im_start|>"),
        "im_end": single("<|im_end|>"),
        "pad": single("<|endoftext|>"),
        "tts_pad": single("<tts_pad>"),
        "tts_bos": single("<tts_text_bos>"),
        "tts_eos": single("<tts_text_eod>"),
        "system": single("system"),
        "user": single("user"),
        "assistant": single("assistant"),
    }


def tiny_config(spec: TinySpec, tokenizer: PreTrainedTokenizerBase) -> Any:
    """A real ``Qwen3OmniMoeConfig`` with tiny sizes and every token id from ``tokenizer``."""
    from transformers import Qwen3OmniMoeConfig

    ids = token_ids(tokenizer)
    vocab = len(tokenizer)
    hidden = spec.text_hidden_size
    head_dim = hidden // spec.text_heads
    rope = {
        "rope_type": "default",
        "rope_theta": 1_000_000.0,
        "mrope_section": [head_dim // 4, head_dim // 8, head_dim // 8],
        "interleaved": True,
        "mrope_interleaved": True,
    }
    thinker = {
        "text_config": {
            "vocab_size": vocab,
            "hidden_size": hidden,
            "intermediate_size": 2 * hidden,
            "num_hidden_layers": spec.text_layers,
            "num_attention_heads": spec.text_heads,
            "num_key_value_heads": spec.text_kv_heads,
            "head_dim": head_dim,
            "moe_intermediate_size": spec.moe_intermediate_size,
            "num_experts": spec.num_experts,
            "num_experts_per_tok": spec.experts_per_token,
            "max_position_embeddings": 4096,
            "rope_parameters": rope,
            "pad_token_id": ids["pad"],
            "eos_token_id": ids["im_end"],
        },
        "vision_config": {
            "depth": spec.vision_depth,
            "hidden_size": spec.vision_hidden_size,
            "intermediate_size": 2 * spec.vision_hidden_size,
            "num_heads": 2,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": hidden,
            "num_position_embeddings": 256,
            "deepstack_visual_indexes": [0],
        },
        "audio_config": {
            "num_mel_bins": 128,
            "encoder_layers": spec.audio_layers,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 2 * spec.audio_hidden_size,
            "d_model": spec.audio_hidden_size,
            "output_dim": hidden,
            "n_window": 50,
            "n_window_infer": 800,
            "downsample_hidden_size": 16,
            "max_source_positions": 1500,
        },
        "audio_token_id": ids["audio"],
        "image_token_id": ids["image"],
        "video_token_id": ids["video"],
        "audio_start_token_id": ids["audio_start"],
        "vision_start_token_id": ids["vision_start"],
        "user_token_id": ids["user"],
        "position_id_per_seconds": 13,
    }
    codec = spec.codec_vocab_size
    talker_hidden = spec.talker_hidden_size
    small_decoder = {
        "vocab_size": codec,
        "hidden_size": talker_hidden,
        "intermediate_size": 2 * talker_hidden,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": talker_hidden // 2,
    }
    talker = {
        "text_config": {
            **small_decoder,
            "moe_intermediate_size": talker_hidden,
            "shared_expert_intermediate_size": talker_hidden,
            "num_experts": 2,
            "num_experts_per_tok": 1,
            "rope_parameters": {**rope, "mrope_section": [4, 2, 2]},
        },
        "code_predictor_config": {**small_decoder, "num_code_groups": spec.code_groups},
        "num_code_groups": spec.code_groups,
        "thinker_hidden_size": hidden,
        "accept_hidden_layer": spec.text_layers - 1,
        "codec_pad_id": codec - 6,
        "codec_bos_id": codec - 5,
        "codec_eos_token_id": codec - 4,
        "codec_nothink_id": codec - 3,
        "codec_think_bos_id": codec - 2,
        "codec_think_eos_id": codec - 1,
        "audio_token_id": ids["audio"],
        "image_token_id": ids["image"],
        "video_token_id": ids["video"],
        "vision_start_token_id": ids["vision_start"],
        "audio_start_token_id": ids["audio_start"],
        "speaker_id": {"tiny": 0},
        "spatial_merge_size": 2,
    }
    code2wav = {
        "codebook_size": codec,
        "hidden_size": talker_hidden,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "intermediate_size": 2 * talker_hidden,
        "num_quantizers": spec.code_groups,
        "upsample_rates": [2, 2],
        "upsampling_ratios": [2],
        "decoder_dim": talker_hidden,
        "sliding_window": 8,
    }
    return Qwen3OmniMoeConfig(
        thinker_config=thinker,
        talker_config=talker,
        code2wav_config=code2wav,
        enable_audio_output=True,
        im_start_token_id=ids["im_start"],
        im_end_token_id=ids["im_end"],
        tts_pad_token_id=ids["tts_pad"],
        tts_bos_token_id=ids["tts_bos"],
        tts_eos_token_id=ids["tts_eos"],
        system_token_id=ids["system"],
        user_token_id=ids["user"],
        assistant_token_id=ids["assistant"],
    )


def _build_model(spec: TinySpec, tokenizer: PreTrainedTokenizerBase, seed: int) -> Any:
    import torch
    from transformers import Qwen3OmniMoeForConditionalGeneration

    config = tiny_config(spec, tokenizer)
    config.architectures = ["Qwen3OmniMoeForConditionalGeneration"]
    torch.manual_seed(seed)
    model = Qwen3OmniMoeForConditionalGeneration(config)
    # Fused MoE expert weights are created with torch.empty and the talker's are never
    # initialised (values up to 1e37, different each build): seed them explicitly.
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if type(module).__name__.endswith("Experts"):
                for param in module.parameters(recurse=False):
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    return model.eval()


def _build_processor(tokenizer: PreTrainedTokenizerBase) -> Any:
    from transformers import Qwen3OmniMoeProcessor, WhisperFeatureExtractor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    pixels = {"min_pixels": 32 * 32, "max_pixels": 128 * 128}
    vision = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2}
    return Qwen3OmniMoeProcessor(
        image_processor=Qwen2VLImageProcessor(**vision, **pixels),
        video_processor=Qwen2VLVideoProcessor(**vision, **pixels),
        feature_extractor=WhisperFeatureExtractor(feature_size=128, sampling_rate=16000),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
