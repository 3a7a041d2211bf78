"""The talker of a Qwen3-Omni checkpoint as the trained policy: codec-0 of the speech output.

:class:`Qwen3OmniTalkerPolicy` is the checkpoint's own class (thinker, talker, code2wav,
under the checkpoint's parameter names) with two methods of its own:

- :meth:`~Qwen3OmniTalkerPolicy.sample_speech`: thinker -> talker -> code predictor ->
  code2wav for one prompt and its spoken text, ``n`` talker samples at once. Each sample
  holds the codec-0 tokens (the policy's actions), their log-probs under the sampling
  distribution, what the talker consumed (its prefill embeddings and their 3-D rope
  positions, the residual codebooks the code predictor sampled, the text stream fed
  alongside) and the waveform.
- :meth:`~Qwen3OmniTalkerPolicy.forward`: the talker teacher-forced on those stored fields,
  returning codec-0 logits over the whole row, as the actor's log-prob gather expects.

Codec ids that are never audio (the codec's control tokens; ids at or past the codebook
in the real checkpoint) are suppressed in both, except the end-of-speech token, so the
sampling distribution and the recomputed one are the same distribution (vLLM-Omni's talker
stage masks the same ids: ``Qwen3OmniRolloutAdapter.policy_logit_mask``).

Importing this module imports transformers' Qwen3-Omni modelling code: the talker
adapter imports it only when a model is loaded.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from transformers import Qwen3OmniMoeConfig
from transformers.modeling_outputs import CausalLMOutput
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeForConditionalGeneration

from omni_contracts.speech import SpeechRollout
from omni_qwen3.rollout_adapter import suppressed_codec_ids
from omni_qwen3.talker_fields import PREFILL_EMBEDS, PREFILL_POSITIONS, RESIDUAL_CODES, TRAILING_TEXT, TTS_PAD_EMBED
from omni_qwen3.token_ids import complete_thinker_config

TALKER_DECODER_LAYER = "Qwen3OmniMoeTalkerDecoderLayer"
NOT_SAMPLED = -1
CODEC_FRAME_RATE_HZ = 12.5  # Qwen3-Omni's codec: 12.5 frames a second (24 kHz / 1920 samples a frame)
REBUILT_CONDITIONING_CACHE = 64
"""Sources whose rebuilt conditioning is kept (on the model's device; up to a few MB each for
the 30B talker): enough for the n samples of a GRPO group, which sit together in a batch."""
ROPE_MEDIA_KEYS = ("image_grid_thw", "video_grid_thw", "video_second_per_grid", "audio_feature_lengths")


def with_audio_lengths(media: Mapping[str, Any]) -> dict[str, Any]:
    """``media`` plus ``audio_feature_lengths`` (the talker's rope reads them) when it has audio."""
    if "feature_attention_mask" in media and "audio_feature_lengths" not in media:
        return {**media, "audio_feature_lengths": media["feature_attention_mask"].sum(dim=1)}
    return dict(media)


def _token_span(mask: Tensor, row: int) -> tuple[int, int]:
    """``(start, end)`` of the one run of ones in a row's attention mask.

    Raises:
        ValueError: the row has no tokens, or holes between them.
    """
    ones = torch.nonzero(mask).flatten()
    if ones.numel() == 0 or int(ones[-1]) + 1 - int(ones[0]) != ones.numel():
        raise ValueError(f"row {row}: its attention mask is not one run of tokens (padding on either side only).")
    return int(ones[0]), int(ones[-1]) + 1


class Qwen3OmniTalkerPolicy(Qwen3OmniMoeForConditionalGeneration):
    """``Qwen3OmniMoeForConditionalGeneration`` whose forward is the talker's codec-0 policy."""

    def __init__(self, config: Qwen3OmniMoeConfig) -> None:
        if not config.enable_audio_output:
            raise ValueError("Training the talker needs a checkpoint with enable_audio_output=true.")
        complete_thinker_config(config)  # the frozen thinker's ids (omni_qwen3.token_ids)
        super().__init__(config)
        self._no_split_modules = [TALKER_DECODER_LAYER]
        self.suppressed_codec_ids = suppressed_codec_ids(config)
        # Conditioning rebuilt from source ids, by source: the thinker is frozen in talker
        # training, and a GRPO group's n samples (and each pass over them) share one source.
        self._rebuilt: OrderedDict[tuple[str, tuple[int, ...]], tuple[Tensor, Tensor, Tensor, Tensor]] = OrderedDict()

    @property
    def speech_sample_rate(self) -> int:
        """24000 for the real checkpoint; a tiny code2wav upsamples less, so its rate is lower."""
        return round(CODEC_FRAME_RATE_HZ * int(self.code2wav.total_upsample))

    @property
    def speakers(self) -> tuple[str, ...]:
        """The checkpoint's voices (``talker_config.speaker_id``), in its order."""
        talker_config: Any = self.config.talker_config
        return tuple(talker_config.speaker_id)

    def get_input_embeddings(self) -> Any:
        return self.talker.get_input_embeddings()

    def get_output_embeddings(self) -> Any:
        return self.talker.codec_head

    # --- the actor's forward --------------------------------------------------------------

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        residual_codes: Sequence[Tensor],
        talker_prefill_embeds: Sequence[Tensor | None] | None = None,
        talker_prefill_positions: Sequence[Tensor | None] | None = None,
        trailing_text_hidden: Sequence[Tensor | None] | None = None,
        tts_pad_embed: Sequence[Tensor | None] | None = None,
        talker_source_ids: Sequence[Tensor | None] | None = None,
        **_: Any,
    ) -> CausalLMOutput:
        """Codec-0 logits ``[B, S, V]`` for rows of prefill ids followed by codec-0 tokens,
        teacher-forced: each token's input is its codec embedding plus its residual codes'
        embeddings plus the text stream, exactly as in generation. A row's tokens are the run
        of ones in its attention mask (left-padded as the local engine batches, or right-padded
        as verl does), its last ``len(residual_codes[row])`` the response. Each row's
        conditioning is the stored one, or else rebuilt from its ``talker_source_ids`` (see
        :mod:`omni_qwen3.talker_fields`)."""
        batch, width = input_ids.shape
        stored = (talker_prefill_embeds, talker_prefill_positions, trailing_text_hidden, tts_pad_embed)
        talker = self.talker
        hidden = talker.config.text_config.hidden_size
        dtype = talker.codec_head.weight.dtype
        device = input_ids.device
        embeds = torch.zeros(batch, width, hidden, dtype=dtype, device=device)
        positions = torch.zeros(3, batch, width, dtype=torch.long, device=device)
        codec_embedding = talker.get_input_embeddings()
        residual_embeddings = talker.code_predictor.get_input_embeddings()
        for row in range(batch):
            prefill, prefill_positions, text, pad = self._row_conditioning(row, stored, talker_source_ids)
            prefill = prefill.to(device, dtype)
            length = prefill.shape[0]
            codes = residual_codes[row].to(device)
            steps = int(codes.shape[0])
            start, end = _token_span(attention_mask[row], row)
            if end - start - steps != length:
                raise ValueError(
                    f"row {row}: its prompt ({end - start - steps} positions before its {steps} response tokens) "
                    f"is not the {length}-position prefill; its talker fields (stored, or rebuilt from its source "
                    "ids) do not belong to it."
                )
            response = start + length
            embeds[row, start:response] = prefill
            prefill_positions = prefill_positions.to(device)
            positions[:, row, start:response] = prefill_positions
            positions[:, row, response:end] = prefill_positions.max() + 1 + torch.arange(steps, device=device)
            tokens = codec_embedding(input_ids[row, response:end])
            for group, table in enumerate(residual_embeddings):
                tokens = tokens + table(codes[:, group].clamp(min=0))
            text = text.to(device, dtype)
            pad = pad.to(device, dtype).reshape(1, hidden)
            stream = torch.cat([text[:steps], pad.expand(max(0, steps - text.shape[0]), hidden)])
            embeds[row, response:end] = tokens + stream
        out = talker.model(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=positions)
        logits = talker.codec_head(out.last_hidden_state)
        suppressed = torch.zeros(logits.shape[-1], dtype=torch.bool, device=device)
        suppressed[self.suppressed_codec_ids] = True
        logits = logits.masked_fill(suppressed, torch.finfo(logits.dtype).min)
        return CausalLMOutput(logits=logits)

    def _row_conditioning(
        self,
        row: int,
        stored: tuple[Sequence[Tensor | None] | None, ...],
        source_ids: Sequence[Tensor | None] | None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Row ``row``'s prefill embeddings, positions, text stream and text-pad embedding:
        the stored ones, or rebuilt from its source ids with the frozen thinker."""
        fields = [None if column is None else column[row] for column in stored]
        if all(field is not None for field in fields):
            return fields[0], fields[1], fields[2], fields[3]  # type: ignore[return-value]
        source = None if source_ids is None else source_ids[row]
        if source is None or any(field is not None for field in fields):
            raise ValueError(
                f"row {row}: the talker's conditioning is incomplete; pass every stored field "
                "(talker_prefill_embeds, talker_prefill_positions, trailing_text_hidden, tts_pad_embed) "
                "or talker_source_ids."
            )
        sequence = torch.as_tensor(source, dtype=torch.long, device=self.talker.codec_head.weight.device).reshape(1, -1)
        thinker_config: Any = self.config.thinker_config
        media_ids = [thinker_config.audio_token_id, thinker_config.image_token_id, thinker_config.video_token_id]
        if bool(torch.isin(sequence, torch.tensor(media_ids, device=sequence.device)).any()):
            raise ValueError(
                f"row {row}: the talker's source sequence holds media placeholders. Its conditioning is rebuilt "
                "from text only: the actor has no media for it, and vLLM-Omni 0.28 hands the talker a different "
                "thinker state at media positions than transformers does (vllm-project/vllm-omni#3184). Use "
                "text prompts, or the local engine, which stores the conditioning it used."
            )
        key = (str(sequence.device), tuple(sequence[0].tolist()))
        cached = self._rebuilt.get(key)
        if cached is None:
            with torch.no_grad():
                prefill, _, positions, trailing, tts_pad = self.talker_prefill(sequence, self.speakers[0], {})
            cached = self._rebuilt[key] = (prefill, positions, trailing, tts_pad)
            while len(self._rebuilt) > REBUILT_CONDITIONING_CACHE:
                self._rebuilt.popitem(last=False)
        else:
            self._rebuilt.move_to_end(key)
        return cached

    # --- rollout ---------------------------------------------------------------------------

    def talker_prefill(
        self, sequence: Tensor, speaker: str, media: Mapping[str, Any], thinker: Any = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """What the talker consumes for ``sequence`` (``[1, S]``: the chat prompt, then
        ``<|im_start|>assistant\\n`` and the spoken text, no ``<|im_end|>``), from one thinker
        forward: prefill embeddings ``[L, D]``, prefill ids ``[L]``, their rope positions
        ``[3, L]``, the text stream ``[R, D]`` and the text-pad embedding ``[D]``.

        ``thinker``: another thinker to read (a trained one, to measure talker drift);
        default this checkpoint's. Differentiable in that thinker's parameters when grad
        mode is on (``sample_speech`` runs it without)."""
        thinker = self.thinker if thinker is None else thinker
        config: Any = self.config
        speaker_id = config.talker_config.speaker_id.get(speaker.lower())
        if speaker_id is None:
            raise ValueError(f"Unknown speaker {speaker!r}; this checkpoint has {sorted(config.talker_config.speaker_id)}.")
        media = with_audio_lengths(media)
        thinker_inputs = {k: v for k, v in media.items() if k != "audio_feature_lengths"}
        out = thinker(
            input_ids=sequence, attention_mask=torch.ones_like(sequence), output_hidden_states=True, **thinker_inputs
        )
        thinker_embed = out.hidden_states[0]
        thinker_hidden = out.hidden_states[config.talker_config.accept_hidden_layer]
        thinker_config = config.thinker_config
        multimodal = (
            (sequence == thinker_config.audio_token_id) | (sequence == thinker_config.image_token_id)
            | (sequence == thinker_config.video_token_id)
        )
        specials = torch.tensor([[config.tts_bos_token_id, config.tts_eos_token_id, config.tts_pad_token_id]],
                                device=sequence.device)
        tts_bos, tts_eos, tts_pad = self.talker.text_projection(thinker.get_input_embeddings()(specials)).chunk(3, dim=1)
        starts = torch.nonzero(sequence[0] == config.im_start_token_id).flatten().tolist() + [sequence.shape[1]]
        if len(starts) < 2 or int(sequence[0, starts[-2] + 1]) != config.assistant_token_id:
            raise ValueError("The sequence must end with an assistant turn holding the text to speak.")
        if sequence.shape[1] - starts[-2] < 4:
            raise ValueError("The assistant turn holds no text to speak.")
        parts, ids, trailing = [], [], None
        for index, (start, end) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
            role = int(sequence[0, start + 1])
            if role == config.user_token_id:
                parts.append(self._get_talker_user_parts(start, end, multimodal, thinker_hidden, thinker_embed))
                ids.append(sequence[:, start:end])
            elif role == config.assistant_token_id and index == len(starts) - 2:
                part, part_ids, trailing = self._get_talker_assistant_parts(
                    start, end, speaker_id, thinker_embed, tts_pad, tts_bos, tts_eos
                )
                parts.append(part)
                ids.append(part_ids)
            # system turns and earlier assistant turns: the talker does not see them
        assert trailing is not None
        prefill = torch.cat(parts, dim=1)
        prefill_ids = torch.cat(ids, dim=1)
        positions, _ = self.talker.get_rope_index(
            prefill_ids, media.get("image_grid_thw"), media.get("video_grid_thw"), torch.ones_like(prefill_ids),
            False, media.get("audio_feature_lengths"), media.get("video_second_per_grid"),
        )
        return prefill[0], prefill_ids[0], positions[:, 0], trailing[0], tts_pad[0, 0]

    @torch.no_grad()
    def sample_speech(
        self,
        sequence: Tensor,
        *,
        n: int,
        max_new_tokens: int,
        temperature: float = 1.0,
        speaker: str | None = None,
        media: Mapping[str, Any] | None = None,
        thinker: Any = None,
    ) -> list[SpeechRollout]:
        """``n`` spoken renditions of the assistant text that ends ``sequence`` (see
        :meth:`talker_prefill`). Codec-0 is sampled from the talker's distribution at
        ``temperature`` (no top-k/top-p, no repetition penalty: the distribution the actor
        recomputes); the residual codebooks come from the frozen code predictor as in
        transformers' own generation. ``thinker``: another thinker to read (as in
        :meth:`talker_prefill`)."""
        was_training = self.training
        self.eval()  # KV cache on (off in training mode under gradient checkpointing), no dropout
        try:
            return self._sample_speech(sequence, n, max_new_tokens, temperature, speaker, media, thinker)
        finally:
            self.train(was_training)

    def _sample_speech(
        self, sequence: Tensor, n: int, max_new_tokens: int, temperature: float, speaker: str | None,
        media: Mapping[str, Any] | None, thinker: Any,
    ) -> list[SpeechRollout]:
        media = with_audio_lengths(media or {})
        talker_config: Any = self.config.talker_config
        speaker = speaker or self.speakers[0]
        prefill, prefill_ids, positions, trailing, tts_pad = self.talker_prefill(sequence, speaker, media, thinker)
        eos = talker_config.codec_eos_token_id
        # The talker's rope reads one entry per media item of each row: every row repeats them.
        grids = {k: torch.cat([torch.as_tensor(media[k])] * n) for k in ROPE_MEDIA_KEYS if media.get(k) is not None}
        result = self.talker.generate(
            inputs_embeds=prefill[None].expand(n, -1, -1),
            attention_mask=torch.ones(n, prefill.shape[0], dtype=torch.long, device=prefill.device),
            talker_input_ids=prefill_ids[None].expand(n, -1),
            trailing_text_hidden=trailing[None],
            tts_pad_embed=tts_pad.reshape(1, 1, -1),
            max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
            repetition_penalty=1.0, eos_token_id=eos, pad_token_id=eos, suppress_tokens=suppressed_codec_ids(self.config),
            output_hidden_states=True, output_scores=True, return_dict_in_generate=True, **grids,
        )
        expected_delta = int(positions.max()) + 1 - prefill.shape[0]
        if self.talker.rope_deltas is not None and not bool((self.talker.rope_deltas == expected_delta).all()):
            raise RuntimeError("The talker's rope positions differ from the stored ones; transformers changed under us.")
        tokens = result.sequences[:, -len(result.scores):]  # [n, T]
        log_probs = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in result.scores], dim=1)
        token_log_probs = log_probs.gather(-1, tokens[..., None])[..., 0]
        # Decode step t (t >= 1) consumed token t-1 with its residual codes: [n, G].
        steps = [h[-1] for h in result.hidden_states[1:]]
        groups = talker_config.num_code_groups
        all_codes = torch.stack(steps, dim=1) if steps else tokens.new_zeros(n, 0, groups)
        samples = []
        for row in range(n):
            ended = (tokens[row] == eos).nonzero()
            length = int(ended[0]) + 1 if len(ended) else tokens.shape[1]
            residual = torch.full((length, groups - 1), NOT_SAMPLED, dtype=torch.long, device=tokens.device)
            known = min(length, all_codes.shape[1])
            residual[:known] = all_codes[row, :known, 1:]
            spoken = length - 1 if len(ended) else known  # frames with every codebook sampled
            codes = torch.cat([tokens[row, :spoken, None], residual[:spoken]], dim=1)  # [frames, G]
            samples.append(SpeechRollout(
                prompt_ids=prefill_ids.tolist(),
                response_ids=tokens[row, :length].tolist(),
                response_logprobs=token_log_probs[row, :length].tolist(),
                extra_fields={
                    PREFILL_EMBEDS: prefill.float().cpu(),
                    PREFILL_POSITIONS: positions.cpu(),
                    RESIDUAL_CODES: residual.cpu(),
                    TRAILING_TEXT: trailing.float().cpu(),
                    TTS_PAD_EMBED: tts_pad.float().cpu(),
                },
                waveform=self.decode_codes(codes),
                finished=bool(len(ended)),
            ))
        return samples

    @torch.no_grad()
    def decode_codes(self, codes: Tensor) -> Tensor:
        """The waveform ``[samples]`` of codec frames ``[frames, G]`` (empty for none)."""
        if codes.shape[0] == 0:
            return torch.zeros(0)
        wav = self.code2wav.chunked_decode(codes.T[None].to(self.code2wav.device), chunk_size=300, left_context_size=25)
        return wav.reshape(-1).float().cpu()
