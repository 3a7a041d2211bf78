"""The namespaced extra fields of a Qwen3-Omni talker sample: what the talker consumed,
stored at rollout and read by the actor's teacher-forced forward. A light module (no
transformers import): the adapter registers with it, the policy and drift probe use it.

A sample carries the talker's conditioning in one of two forms:

- **stored** (the local engine): the prefill embeddings and positions, the text stream and
  the text-pad embedding, exactly as the talker consumed them;
- **source** (vLLM-Omni, whose talker worker keeps its conditioning to itself): the thinker
  sequence the talker spoke from; the actor rebuilds the conditioning from it with the frozen
  thinker (:meth:`omni_qwen3.talker_policy.Qwen3OmniTalkerPolicy.talker_prefill`).

Either way the residual codebooks are stored. :func:`missing_conditioning` says which keys a
sample lacks for either form; the actor refuses a sample that has neither.
"""

from __future__ import annotations

from collections.abc import Mapping

from omni_contracts import ExtraFieldError, ExtraFieldSpec

PREFILL_EMBEDS = "qwen3_omni.talker_prefill_embeds"
PREFILL_POSITIONS = "qwen3_omni.talker_prefill_positions"
RESIDUAL_CODES = "qwen3_omni.residual_codes"
TRAILING_TEXT = "qwen3_omni.trailing_text_hidden"
TTS_PAD_EMBED = "qwen3_omni.tts_pad_embed"
SOURCE_IDS = "qwen3_omni.talker_source_ids"

STORED_CONDITIONING = (PREFILL_EMBEDS, PREFILL_POSITIONS, TRAILING_TEXT, TTS_PAD_EMBED)
"""The conditioning as the local engine stores it."""

TALKER_FIELDS = {
    PREFILL_EMBEDS: ExtraFieldSpec(
        PREFILL_EMBEDS, ("prompt_length", "talker_hidden"), required=False, forward_arg="talker_prefill_embeds",
        description="the talker's prefill input embeddings (projected thinker states, codec specials)",
    ),
    PREFILL_POSITIONS: ExtraFieldSpec(
        PREFILL_POSITIONS, (3, "prompt_length"), required=False, forward_arg="talker_prefill_positions",
        description="the prefill's 3-D rope positions, as the talker computed them",
    ),
    RESIDUAL_CODES: ExtraFieldSpec(
        RESIDUAL_CODES, ("response_length", "residual_groups"), forward_arg="residual_codes",
        description="codebooks 1..G-1 the code predictor sampled for each codec-0 token (-1: never sampled)",
    ),
    TRAILING_TEXT: ExtraFieldSpec(
        TRAILING_TEXT, ("text_length", "talker_hidden"), required=False, forward_arg="trailing_text_hidden",
        description="the text stream added to the talker's input at each step",
    ),
    TTS_PAD_EMBED: ExtraFieldSpec(
        TTS_PAD_EMBED, ("talker_hidden",), required=False, forward_arg="tts_pad_embed",
        description="the text stream once the text has run out",
    ),
    SOURCE_IDS: ExtraFieldSpec(
        SOURCE_IDS, ("source_length",), required=False, forward_arg="talker_source_ids",
        description="the thinker sequence the talker spoke from (chat prompt, assistant header, spoken text), "
        "when the engine returns no conditioning: the actor rebuilds it with the frozen thinker",
    ),
}


def missing_conditioning(extra_fields: Mapping[str, object]) -> list[str]:
    """The keys a sample lacks to give the talker its conditioning: ``[]`` when it holds the
    stored conditioning or its source, else the stored keys it misses (or the source key,
    when it holds none of the stored ones)."""
    present = {key for key, value in extra_fields.items() if value is not None}
    stored = [key for key in STORED_CONDITIONING if key not in present]
    if not stored:
        return []
    if SOURCE_IDS in present and len(stored) == len(STORED_CONDITIONING):
        return []
    return stored if len(stored) < len(STORED_CONDITIONING) else [SOURCE_IDS]


def check_conditioning(extra_fields: Mapping[str, object], where: str) -> None:
    """Raise :class:`ExtraFieldError` naming the keys ``where`` lacks (see :func:`missing_conditioning`)."""
    missing = missing_conditioning(extra_fields)
    if missing:
        raise ExtraFieldError(
            f"{where}: the talker's conditioning is incomplete: missing {', '.join(missing)}. A talker sample "
            f"holds either every stored field ({', '.join(STORED_CONDITIONING)}) or {SOURCE_IDS}."
        )
