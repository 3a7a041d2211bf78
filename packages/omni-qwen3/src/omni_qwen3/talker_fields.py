"""The namespaced extra fields of a Qwen3-Omni talker sample: what the talker consumed,
stored at rollout and read by the actor's teacher-forced forward. A light module (no
transformers import): the adapter registers with it, the policy and drift probe use it."""

from __future__ import annotations

from omni_contracts import ExtraFieldSpec

PREFILL_EMBEDS = "qwen3_omni.talker_prefill_embeds"
PREFILL_POSITIONS = "qwen3_omni.talker_prefill_positions"
RESIDUAL_CODES = "qwen3_omni.residual_codes"
TRAILING_TEXT = "qwen3_omni.trailing_text_hidden"
TTS_PAD_EMBED = "qwen3_omni.tts_pad_embed"

TALKER_FIELDS = {
    PREFILL_EMBEDS: ExtraFieldSpec(
        PREFILL_EMBEDS, ("prompt_length", "talker_hidden"), forward_arg="talker_prefill_embeds",
        description="the talker's prefill input embeddings (projected thinker states, codec specials)",
    ),
    PREFILL_POSITIONS: ExtraFieldSpec(
        PREFILL_POSITIONS, (3, "prompt_length"), forward_arg="talker_prefill_positions",
        description="the prefill's 3-D rope positions, as the talker computed them",
    ),
    RESIDUAL_CODES: ExtraFieldSpec(
        RESIDUAL_CODES, ("response_length", "residual_groups"), forward_arg="residual_codes",
        description="codebooks 1..G-1 the code predictor sampled for each codec-0 token (-1: never sampled)",
    ),
    TRAILING_TEXT: ExtraFieldSpec(
        TRAILING_TEXT, ("text_length", "talker_hidden"), forward_arg="trailing_text_hidden",
        description="the text stream added to the talker's input at each step",
    ),
    TTS_PAD_EMBED: ExtraFieldSpec(
        TTS_PAD_EMBED, ("talker_hidden",), forward_arg="tts_pad_embed",
        description="the text stream once the text has run out",
    ),
}
