"""Build a complete, tiny Qwen3-Omni checkpoint offline: config, weights, tokenizer,
chat template and processor, loadable with ``from_pretrained``.

The checkpoint is the full ``Qwen3OmniMoeForConditionalGeneration`` (thinker, talker and
code2wav), so stripping and adapter code see the real structure. Everything is derived
from :class:`TinySpec` and a seed; a build is cached under a hash of both (and the
transformers version; :func:`omni_model_kit.tiny.build_tiny`), so repeated calls return the
same directory at once.

CLI: ``python -m omni_qwen3.tiny --out DIR [--seed N]`` (prints the directory).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_model_kit import tiny as kit

from omni_qwen3.tiny.chat_template import CHAT_TEMPLATE

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

BUILDER_VERSION = 4  # bump whenever the written checkpoint changes for the same spec and seed
FAMILY = "tiny-qwen3-omni"
PATCH_SIZE = 16  # the vision encoder's and the processor's
CONTROL_BAND = 1024
"""The talker's ids past the codebook, as in the released checkpoint (codebook 2048, vocabulary
3072). vLLM-Omni bans the last 1024 ids of the talker's vocabulary but codec EOS
(``Qwen3OmniMoeForConditionalGeneration._get_talker_suppressed_tokens``); a smaller band would
index before the vocabulary, and a larger one would let the talker emit ids code2wav has no
code for."""
CONTROL_OFFSETS = {"codec_pad_id": 100, "codec_bos_id": 101, "codec_eos_token_id": 102,
                   "codec_nothink_id": 107, "codec_think_bos_id": 108, "codec_think_eos_id": 109}
"""Where the control ids sit past the codebook, as in the released checkpoint."""


@dataclass(frozen=True)
class TinySpec(kit.TinySpec):
    """Sizes of the tiny model: the model kit's, and the MoE thinker's and the talker's code
    groups."""

    num_experts: int = 4
    experts_per_token: int = 2
    moe_intermediate_size: int = 64
    code_groups: int = 4


SERVED_TALKER_SPEC = TinySpec(text_layers=25, code_groups=16, codec_vocab_size=2048)
"""The sizes vLLM-Omni 0.28's thinker -> talker -> code2wav pipeline takes as fixed, for the
tests that run the talker on the real engine. The hand-off processors
(``stage_input_processors/qwen3_omni.py``) read the thinker's hidden state at layer 24 (the
released ``accept_hidden_layer``) and take codes at or past 2048 for control ids; code2wav's
stage reshapes codes into 16 groups (``qwen3_omni.py``). 25 thinker layers, a 2048-code
codebook and 16 code groups meet all three; the default spec stays small for everything else."""


def build_tiny_qwen3_omni(
    out_dir: str | Path | None = None, *, seed: int = 0, spec: TinySpec | None = None
) -> Path:
    """Write (or reuse) a tiny Qwen3-Omni checkpoint and return its directory; the arguments
    are :func:`omni_model_kit.tiny.build_tiny`'s."""
    return kit.build_tiny(FAMILY, spec or TinySpec(), seed, BUILDER_VERSION, _write_checkpoint, out_dir)


def _write_checkpoint(out: Path, spec: TinySpec, seed: int) -> None:
    from transformers import Qwen3OmniMoeProcessor

    from omni_qwen3.tiny.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(spec.vocab_size)
    tokenizer.chat_template = CHAT_TEMPLATE
    model = _build_model(spec, tokenizer, seed)
    processor = kit.qwen_processor(Qwen3OmniMoeProcessor, tokenizer, CHAT_TEMPLATE, PATCH_SIZE)
    kit.save_checkpoint(out, model, processor, tokenizer, CHAT_TEMPLATE)


TOKENS = {
    "image": "<|image_pad|>", "video": "<|video_pad|>", "audio": "<|audio_pad|>", "vision_start": "<|vision_start|>",
    "audio_start": "<|audio_start|>", "audio_end": "<|audio_end|>", "im_start": "<|im_start|>", "im_end": "<|im_end|>",
    "pad": "<|endoftext|>",
    "tts_pad": "<tts_pad>", "tts_bos": "<tts_text_bos>", "tts_eos": "<tts_text_eod>", "system": "system",
    "user": "user", "assistant": "assistant",
}
"""The texts whose ids the config needs (:func:`omni_model_kit.tiny.single_token_ids`)."""


def tiny_config(spec: TinySpec, tokenizer: PreTrainedTokenizerBase) -> Any:
    """A real ``Qwen3OmniMoeConfig`` with tiny sizes and every token id from ``tokenizer``."""
    from transformers import Qwen3OmniMoeConfig

    ids = kit.single_token_ids(tokenizer, TOKENS)
    rope = kit.mrope(spec, interleaved=True, mrope_interleaved=True)
    thinker = {
        "text_config": kit.text_config(
            spec, len(tokenizer), ids, rope,
            head_dim=spec.text_hidden_size // spec.text_heads,
            moe_intermediate_size=spec.moe_intermediate_size,
            num_experts=spec.num_experts,
            num_experts_per_tok=spec.experts_per_token,
        ),
        **kit.encoder_configs(
            spec, PATCH_SIZE,
            # vLLM sizes the position grid from image_size // patch_size, transformers from
            # num_position_embeddings: the two agree (16 x 16 patches).
            vision={"num_position_embeddings": 256, "image_size": 16 * PATCH_SIZE, "apply_vit_abs_pos_embed": True,
                    "deepstack_visual_indexes": [0]},
            audio={"n_window": 50, "n_window_infer": 800, "downsample_hidden_size": 16},
        ),
        "audio_token_id": ids["audio"],
        "image_token_id": ids["image"],
        "video_token_id": ids["video"],
        "audio_start_token_id": ids["audio_start"],
        # vLLM's Qwen3-Omni lays a video's soundtrack out with it (use_audio_in_video), as the
        # real checkpoint's config.json carries it; transformers' config class has no field for it.
        "audio_end_token_id": ids["audio_end"],
        "vision_start_token_id": ids["vision_start"],
        "user_token_id": ids["user"],
        "position_id_per_seconds": 13,
    }
    codebook = spec.codec_vocab_size
    talker_hidden = spec.talker_hidden_size
    small_decoder = kit.talker_decoder(spec)
    talker = {
        "text_config": {
            **small_decoder,
            "vocab_size": codebook + CONTROL_BAND,
            "moe_intermediate_size": talker_hidden,
            "shared_expert_intermediate_size": talker_hidden,
            "num_experts": 2,
            "num_experts_per_tok": 1,
            "rope_parameters": {**rope, "mrope_section": kit.mrope_section(spec.talker_head_dim)},
        },
        "code_predictor_config": {**small_decoder, "num_code_groups": spec.code_groups},
        "num_code_groups": spec.code_groups,
        "thinker_hidden_size": spec.text_hidden_size,
        "accept_hidden_layer": spec.text_layers - 1,
        **{name: codebook + offset for name, offset in CONTROL_OFFSETS.items()},
        "audio_token_id": ids["audio"],
        "image_token_id": ids["image"],
        "video_token_id": ids["video"],
        "vision_start_token_id": ids["vision_start"],
        "audio_start_token_id": ids["audio_start"],
        "speaker_id": {"tiny": 0},
        "spatial_merge_size": 2,
    }
    code2wav = {
        "codebook_size": codebook,
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

    model = kit.seeded_model(Qwen3OmniMoeForConditionalGeneration, tiny_config(spec, tokenizer), seed)
    # Fused MoE expert weights are created with torch.empty and the talker's are never
    # initialised (values up to 1e37, different each build): seed them explicitly.
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if type(module).__name__.endswith("Experts"):
                for param in module.parameters(recurse=False):
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    return model
