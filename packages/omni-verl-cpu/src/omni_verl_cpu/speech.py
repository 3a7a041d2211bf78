"""The ``omni_local`` rollout of a speech stage (``actor_rollout_ref.model.stage=talker``).

vLLM-Omni answers a talker request with its whole pipeline: the thinker answers the chat
prompt greedily, the talker speaks that answer (the trained stage: its codec-0 tokens and
log-probs), code2wav turns the codes into a waveform. :class:`LocalSpeaker` does the same
with the local engine's pieces, in the replica's process: the thinker's greedy answer from a
:class:`~omni_rollout.local_engine.LocalEngine` over the thinker stage (the banned
placeholders, and a new turn, never sampled), then the model's
:class:`~omni_contracts.SpeechPolicy` (``sample_speech``: the talker's tokens with the
conditioning it consumed, the residual codebooks and the decoded waveform).

Its answer is verl's ``TokenOutput`` with the :data:`~omni_rollout.speech_sample.SPEECH_SAMPLE` entry
omni-rl's speech agent loop reads, exactly as its
vLLM-Omni server adds it: the talker's prefill placeholder as the training prompt, the namespaced
fields the training adapter declares (here the conditioning as the talker consumed it, the
form the local engine trains on), and the waveform, its rate and the spoken ids for the
reward. The sample's text is the source the talker read in full, so no sample is cut short
of its conditioning (``source_truncated`` is never set here).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from verl.workers.rollout.replica import TokenOutput

from omni_contracts import RolloutAdapter, is_namespaced
from omni_contracts.speech import SpeechPolicy, find_speech_policy
from omni_rollout.local_engine import LocalEngine, find_policy_module
from omni_rollout.placeholders import policy_logit_mask
from omni_rollout.sampling import SamplingSettings
from omni_contracts.speech import SOURCE_TRUNCATED
from omni_rollout.speech_sample import SPEECH_SAMPLE
from omni_training.logit_mask import masked_ids

THINKER_MODE = "thinker_only"
"""The rollout adapter's mode whose policy stage is the thinker (its text answer)."""
ANSWER_CACHE = 256
"""Prompts whose greedy answer the speaker keeps: a GRPO group's ``n`` requests share one."""


@dataclass(frozen=True)
class SpeechSettings:
    """How one speech request is sampled: the talker's temperature and token budget."""

    temperature: float
    max_new_tokens: int


def speech_settings(sampling: SamplingSettings) -> SpeechSettings:
    """The talker's settings from verl's request, as the local engine read it.

    Raises:
        ValueError: top-k, top-p or stop tokens are set; the talker samples its full
            distribution at a temperature (``SpeechPolicy.sample_speech``), which is what the
            actor recomputes.
    """
    if sampling.top_k != -1 or sampling.top_p != 1.0 or sampling.stop_token_ids:
        raise ValueError(
            "rollout.name=omni_local samples a speech stage at a temperature only (top_k=-1, top_p=1, no stop "
            f"tokens), got top_k={sampling.top_k}, top_p={sampling.top_p}, stop_token_ids={sampling.stop_token_ids}."
        )
    if sampling.temperature <= 0:
        raise ValueError("rollout.name=omni_local samples a speech stage at a positive temperature, got 0 (greedy).")
    return SpeechSettings(sampling.temperature, sampling.max_new_tokens)


class LocalSpeaker:
    """The thinker's answer, then the talker's speech of it, for one prompt at a time."""

    def __init__(
        self,
        model: Any,
        pipeline: RolloutAdapter,
        tokenizer: Any,
        *,
        suppress_token_ids: Sequence[int],
        answer_tokens: int,
    ) -> None:
        self.policy: SpeechPolicy = find_speech_policy(model)
        self.tokenizer = tokenizer
        eos = tokenizer.eos_token_id
        turn = tokenizer.convert_tokens_to_ids("<|im_start|>")  # a new turn would end the answer
        self.thinker = LocalEngine(
            find_policy_module(model, pipeline, THINKER_MODE),
            eos_token_ids=(eos,),
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos,
            stage_id=pipeline.policy_stage_id(THINKER_MODE),
            suppress_token_ids=(*suppress_token_ids, *([turn] if isinstance(turn, int) and turn >= 0 else [])),
        )
        self.answer_tokens = answer_tokens
        self._answers: dict[str, list[int]] = {}

    @classmethod
    def for_model(
        cls, model: Any, pipeline: RolloutAdapter, hf_config: Any, processor: Any, tokenizer: Any, *, answer_tokens: int
    ) -> LocalSpeaker:
        """A speaker whose thinker answers under its own stage's logit mask (the media
        placeholders and the output head's tail past the tokenizer), as the local engine's
        answers (``data.spoken_text=thinker``) do."""
        thinker = find_policy_module(model, pipeline, THINKER_MODE)
        mask = policy_logit_mask(pipeline, THINKER_MODE, hf_config, processor, tokenizer)
        width = int(thinker.get_output_embeddings().weight.shape[0])
        return cls(model, pipeline, tokenizer, suppress_token_ids=masked_ids(mask, width), answer_tokens=answer_tokens)

    def answer(self, prompt_ids: Sequence[int]) -> list[int]:
        """The thinker's greedy answer to the chat prompt, without its end of turn.

        Raises:
            ValueError: the answer is empty: there is nothing to speak.
        """
        key = hashlib.sha256(repr(list(prompt_ids)).encode()).hexdigest()
        if key not in self._answers:
            ids = torch.tensor([list(prompt_ids)], dtype=torch.long)
            greedy = SamplingSettings(n=1, temperature=0.0, max_new_tokens=self.answer_tokens)
            (rollout,) = self.thinker.generate([{"input_ids": ids, "attention_mask": torch.ones_like(ids)}], greedy)
            answer = [t for t in rollout.outputs[0].token_ids if t != self.tokenizer.eos_token_id]
            if not self.tokenizer.decode(answer, skip_special_tokens=True).strip():
                raise ValueError(
                    "The thinker's greedy answer to a speech prompt is empty: nothing to speak (prompt ends "
                    f"{self.tokenizer.decode(list(prompt_ids)[-12:])!r})."
                )
            self._answers[key] = answer
            while len(self._answers) > ANSWER_CACHE:
                self._answers.pop(next(iter(self._answers)))
        return self._answers[key]

    def speak(self, prompt_ids: Sequence[int], n: int, settings: SpeechSettings, seed: int) -> list[TokenOutput]:
        """``n`` spoken samples of the thinker's answer to ``prompt_ids``, seeded."""
        answer = self.answer(prompt_ids)
        sequence = torch.tensor([[*prompt_ids, *answer]], dtype=torch.long)
        torch.manual_seed(seed)
        rollouts = self.policy.sample_speech(
            sequence, n=n, max_new_tokens=settings.max_new_tokens, temperature=settings.temperature
        )
        if len(rollouts) != n:
            raise RuntimeError(f"{type(self.policy).__name__}.sample_speech returned {len(rollouts)} samples, asked for {n}.")
        outputs = []
        for rollout in rollouts:
            fields = {key: value for key, value in rollout.extra_fields.items() if is_namespaced(key)}
            sample = {
                # vLLM-Omni's talker reports its prompt as zeros, one per prefill position; so
                # does this. The actor reads the conditioning from the fields, and verl gathers
                # log-probs over the whole row, where the prefill's ids (thinker-vocabulary text
                # ids among them) would index past the talker's codec vocabulary.
                "prompt_ids": [0] * len(rollout.prompt_ids),
                "response_mask": [1] * len(rollout.response_ids),
                "fields": fields,
                SOURCE_TRUNCATED: False,
                "waveform": torch.as_tensor(rollout.waveform).float().numpy(),
                "sample_rate": int(self.policy.speech_sample_rate),
                "spoken_ids": list(answer),
            }
            outputs.append(TokenOutput(
                token_ids=list(rollout.response_ids),
                log_probs=list(rollout.response_logprobs),
                stop_reason="completed",
                extra_fields={SPEECH_SAMPLE: sample, "finish_reason": "stop" if rollout.finished else "length"},
            ))
        return outputs
