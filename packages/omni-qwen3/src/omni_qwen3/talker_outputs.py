"""vLLM-Omni's outputs of one request -> a talker sample (rollout mode ``talker``).

What vLLM-Omni 0.28 returns for one request of its thinker -> talker (-> code2wav) pipeline
with every stage final (read from its source:
``models/qwen3_omni/qwen3_omni.py``, ``stage_input_processors/qwen3_omni.py``):

- the thinker stage (0): the text it sampled (``token_ids``; the last one, usually
  ``<|im_end|>``, is never fed back, so the talker is not conditioned on it) after the prompt;
- the talker stage (1): the codec-0 tokens it sampled with their log-probs, a placeholder
  prompt (``[0] * L``) as long as the talker's prefill, and under ``multimodal_output``
  ``codes.audio`` every codebook of each token the talker consumed: a ``[rows, G]`` tensor
  whose column 0 is the codec-0 token, one row per decode step (token ``t`` is consumed at
  step ``t + 1``), after ``L`` zero rows for the prefill when those are reported too;
- code2wav (stage 2, mode ``talker`` only): the waveform, under ``multimodal_output``
  ``audio`` with its rate ``sr``.

The talker's conditioning (prefill embeddings, text stream) stays inside vLLM-Omni's worker,
so the sample stores its source, the thinker sequence, and the actor rebuilds it (see
:mod:`omni_qwen3.talker_fields`). The codes are located by their codec-0 column, which must
repeat the sampled tokens: a layout other than the one above is refused, never guessed.

A thinker answer cut at its length limit cannot be trained on: vLLM-Omni 0.28's
``thinker2talker_full_payload`` drops the last row of the thinker's states unconditionally,
taking it for the end-of-turn token's (its Qwen2.5-Omni twin drops it only after a stop: a
length cut leaves no such row). The talker is then conditioned on one text row fewer than
the stored source (prompt + answer[:-1]) holds, so the actor would recompute the log-probs on
other conditioning, silently. Such a sample (the thinker's ``finish_reason`` is ``"length"``) keeps
its tokens and waveform for the reward, but its ``response_mask`` is all 0 (no token is
trained) and :data:`~omni_contracts.speech.SOURCE_TRUNCATED` flags it, for the trainer to count.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from omni_contracts import RolloutSample, SchemaError, StageOutput
from omni_contracts.speech import SOURCE_TRUNCATED
from omni_qwen3.talker_fields import RESIDUAL_CODES, SOURCE_IDS

logger = logging.getLogger(__name__)

NOT_SAMPLED = -1
WAVEFORM = "waveform"
SAMPLE_RATE = "sample_rate"
SPOKEN_IDS = "spoken_ids"
"""Engine-side extra fields (not namespaced: the actor does not read them) for the reward:
the waveform, its rate, and the thinker's tokens the talker spoke."""
LENGTH = "length"


def engine_codes(multimodal_output: Mapping[str, Any] | None) -> Tensor | None:
    """The ``codes.audio`` entry of a stage's multimodal output (nested or flat key), as a
    2-D long tensor; ``None`` when absent."""
    if not multimodal_output:
        return None
    codes = multimodal_output.get("codes")
    value = codes.get("audio") if isinstance(codes, Mapping) else multimodal_output.get("codes.audio")
    if value is None:
        return None
    tensor = torch.as_tensor(value).long()
    if tensor.ndim == 3 and tensor.shape[0] == 1:
        tensor = tensor[0]
    if tensor.ndim != 2:
        raise SchemaError(f"The talker's codes.audio has shape {tuple(tensor.shape)}; expected [rows, codebooks].")
    return tensor


def residual_codes(codes: Tensor, tokens: Sequence[int], prefill_length: int) -> Tensor:
    """Codebooks 1..G-1 ``[T, G-1]`` of the ``T`` sampled codec-0 ``tokens``, ``-1`` where a token
    was never consumed (the last one), from the talker's ``codes`` (see the module docstring).

    Raises:
        SchemaError: no layout of ``codes`` has rows whose codec-0 column repeats ``tokens``.
    """
    count = len(tokens)
    for layout in (codes, codes.T):
        rows = layout.shape[0]
        if layout.shape[1] < 2:
            continue
        for start in (prefill_length, 0):  # with the prefill's rows, or without them
            consumed = rows - start
            if consumed not in (count - 1, count) or consumed < 0:
                continue
            decode = layout[start:]
            if decode.shape[0] and not torch.equal(decode[:, 0], torch.as_tensor(tokens[: decode.shape[0]])):
                continue
            residual = torch.full((count, layout.shape[1] - 1), NOT_SAMPLED, dtype=torch.long)
            residual[: decode.shape[0]] = decode[:, 1:]
            return residual
    raise SchemaError(
        f"The talker's codes ({tuple(codes.shape)}) do not line up with its {count} codec-0 tokens after a "
        f"{prefill_length}-position prefill: expected [rows, codebooks] with {count - 1} or {count} decode rows "
        "(optionally after the prefill's rows) whose first column repeats the tokens. vLLM-Omni's talker output "
        "changed; see omni_qwen3.talker_outputs."
    )


def _ids(value: object) -> tuple[int, ...]:
    """Token ids from a stage's ``data`` entry (any sequence of ints); ``()`` when absent."""
    return tuple(int(t) for t in value) if isinstance(value, Sequence) else ()


def _stage(outputs: Sequence[StageOutput], stage_id: int) -> StageOutput | None:
    matching = [output for output in outputs if output.stage_id == stage_id]
    return matching[-1] if matching else None


def engine_waveform(multimodal_output: Mapping[str, Any] | None) -> tuple[Tensor, int] | None:
    """``(waveform [T] float32, sample rate)`` from code2wav's multimodal output (``audio`` --
    or ``model_outputs``, before vLLM-Omni names it -- as one tensor or chunks, and ``sr``);
    ``None`` when it holds no audio.

    Raises:
        SchemaError: audio without a sample rate.
    """
    if not multimodal_output:
        return None
    audio = multimodal_output.get("audio", multimodal_output.get("model_outputs"))
    if audio is None:
        return None
    chunks = audio if isinstance(audio, list | tuple) else [audio]
    waveform = torch.cat([torch.as_tensor(c).reshape(-1) for c in chunks]) if chunks else torch.zeros(0)
    rate = multimodal_output.get("sr")
    if isinstance(rate, list | tuple):
        rate = rate[0] if rate else None
    if rate is None:
        raise SchemaError("code2wav's output has audio but no sample rate ('sr').")
    return waveform.float(), int(torch.as_tensor(rate).reshape(-1)[0])


def talker_sample(
    sample: RolloutSample, outputs: Sequence[StageOutput], *, thinker_stage: int, talker_stage: int,
    code2wav_stage: int | None = None,
) -> RolloutSample:
    """``sample`` (the talker's tokens and log-probs after the thinker's prompt) as the talker's
    sample: prompt = the talker's prefill placeholder, response = codec-0 tokens, extra fields
    = the residual codes and the thinker sequence the talker spoke from, the spoken tokens
    (``spoken_ids``), :data:`SOURCE_TRUNCATED`, and (from ``code2wav_stage``) the engine's
    ``waveform`` and ``sample_rate`` (``None`` when that stage returned no audio: its reward
    then fails, counted). A thinker cut at its length limit: the response mask is all 0 and
    the flag is set (see the module docstring). Aborted: unchanged.

    Raises:
        SchemaError: a stage's output is missing, the thinker gave no text to speak, or the
            talker's prompt or codes are missing or do not line up.
    """
    talker = _stage(outputs, talker_stage)
    if sample.extra_fields.get("aborted") or talker is None or talker.aborted:
        return sample
    thinker = _stage(outputs, thinker_stage)
    if thinker is None or thinker.aborted:
        raise SchemaError(
            f"The talker answered but the thinker's output (stage {thinker_stage}) is missing; the talker mode "
            "keeps every final stage (combine_engine_outputs)."
        )
    spoken = thinker.token_ids[:-1]  # the last sampled token is never fed to the thinker again
    if not spoken:
        raise SchemaError(
            f"The thinker gave no text to speak (it sampled {list(thinker.token_ids)}); the talker's "
            "conditioning needs at least one text token."
        )
    prompt = _ids(thinker.data.get("prompt_token_ids")) or sample.prompt_ids
    placeholder = _ids(talker.data.get("prompt_token_ids"))
    if not placeholder:
        raise SchemaError(
            f"The talker's output (stage {talker_stage}) carries no prompt_token_ids; its length is the "
            "talker's prefill length, which the actor's rows need."
        )
    codes = engine_codes(talker.data.get("multimodal_output"))  # type: ignore[arg-type]
    if codes is None:
        raise SchemaError(
            f"The talker's output (stage {talker_stage}) has no multimodal_output codes.audio; the residual "
            "codebooks it consumed cannot be recovered."
        )
    extra: dict[str, object] = {
        **{k: v for k, v in sample.extra_fields.items() if "." not in k},
        SOURCE_IDS: torch.tensor(prompt + spoken, dtype=torch.long),
        RESIDUAL_CODES: residual_codes(codes, sample.response_ids, len(placeholder)),
        SPOKEN_IDS: spoken,
        SOURCE_TRUNCATED: thinker.data.get("finish_reason") == LENGTH,
    }
    mask = sample.response_mask
    if extra[SOURCE_TRUNCATED]:
        logger.warning(
            "The thinker's answer (%d tokens) hit its length limit: vLLM-Omni's talker was conditioned one text "
            "row short of the stored source, so this speech sample is masked out of training (counted as "
            "source_truncated).",
            len(thinker.token_ids),
        )
        mask = (0,) * len(sample.response_ids)
    if code2wav_stage is not None:
        vocoder = _stage(outputs, code2wav_stage)
        audio = None if vocoder is None or vocoder.aborted else engine_waveform(
            vocoder.data.get("multimodal_output"))  # type: ignore[arg-type]
        extra[WAVEFORM], extra[SAMPLE_RATE] = audio if audio is not None else (None, None)
    return RolloutSample(
        prompt_ids=placeholder,
        response_ids=sample.response_ids,
        response_mask=mask,
        response_logprobs=sample.response_logprobs,
        extra_fields=extra,
    )
