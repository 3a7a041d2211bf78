"""Talker drift: how training the thinker changes what Qwen3-Omni's frozen talker does.

The talker reads the thinker's token embeddings for text and the thinker's hidden states
(layer ``accept_hidden_layer``) only at image, audio and video positions of the user turn.
So training the thinker's layers (LoRA on attention, say) moves the talker through the
media positions only, and the probes carry a picture and a tone each; a text-only probe
would read 0 unless the embeddings train. A probe set of short phrases is spoken once by
the initial checkpoint (codec-0 tokens, residual codebooks and
the talker's inputs kept); each measurement rebuilds the talker's inputs from the thinker
being trained and compares the talker's codec-0 distributions over the same codes, teacher
forced: ``talker/drift_kl`` is ``KL(initial || current)`` per codec position, averaged. 0
means the talker would speak exactly as before. :meth:`Qwen3OmniTalkerDrift.speak` has the
frozen talker speak the probes anew from the thinker being trained, for audio rewards.

Importing this module imports transformers' Qwen3-Omni modelling code.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from omni_contracts.speech import ProbeSpeech

from omni_qwen3.talker_fields import PREFILL_EMBEDS, PREFILL_POSITIONS, TALKER_FIELDS, TRAILING_TEXT, TTS_PAD_EMBED
from omni_qwen3.talker_policy import Qwen3OmniTalkerPolicy

PROBE_PHRASES = ("Good morning.", "The answer is four.", "Thank you very much.", "See you tomorrow.")


class Qwen3OmniTalkerDrift:
    """A frozen copy of the checkpoint and its spoken probes (see the module docstring)."""

    def __init__(
        self, model_path: str, processor: Any, *, phrases: tuple[str, ...] = PROBE_PHRASES,
        samples_per_phrase: int = 2, max_new_tokens: int = 16, seed: int = 0,
    ) -> None:
        self.reference = Qwen3OmniTalkerPolicy.from_pretrained(model_path).eval().requires_grad_(False)
        self.speaker = self.reference.speakers[0]
        self.phrases = phrases
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.probes: list[tuple[Tensor, dict[str, Any], list[Any], Tensor]] = []
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            for index, phrase in enumerate(phrases):
                sequence, media = spoken_sequence(processor, phrase, seed=index)
                samples = self.reference.sample_speech(
                    sequence, n=samples_per_phrase, max_new_tokens=max_new_tokens, media=media
                )
                with torch.no_grad():
                    initial = self._log_probs(samples, self._fields(samples))
                self.probes.append((sequence, media, samples, initial))
        finally:
            torch.random.set_rng_state(generator_state)

    @staticmethod
    def _fields(samples: list[Any]) -> dict[str, list[Tensor]]:
        return {key: [s.extra_fields[key] for s in samples] for key in TALKER_FIELDS if key in samples[0].extra_fields}

    def _log_probs(self, samples: list[Any], fields: dict[str, list[Tensor]]) -> Tensor:
        """Codec-0 log-distributions ``[n, T, V]`` at each sample's response positions."""
        width = max(len(s.prompt_ids) for s in samples)
        steps = max(len(s.response_ids) for s in samples)
        ids = torch.zeros(len(samples), width + steps, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, s in enumerate(samples):
            ids[row, width - len(s.prompt_ids) : width] = torch.tensor(s.prompt_ids)
            ids[row, width : width + len(s.response_ids)] = torch.tensor(s.response_ids)
            mask[row, width - len(s.prompt_ids) : width + len(s.response_ids)] = 1
        arguments = {spec.forward_arg: fields[key] for key, spec in TALKER_FIELDS.items() if spec.forward_arg and key in fields}
        logits = self.reference(input_ids=ids, attention_mask=mask, **arguments).logits
        return torch.log_softmax(logits[:, width - 1 : width - 1 + steps].float(), dim=-1)

    def drift_kl(self, policy: Any) -> Tensor:
        """``KL(initial || current)`` per codec position, averaged over the probes: a scalar,
        differentiable in the policy's thinker parameters when grad mode is on."""
        thinker = find_thinker(policy)
        total: Tensor | None = None
        count = 0
        for sequence, media, samples, initial in self.probes:
            fields = self._fields(samples)
            prefill, _, positions, trailing, tts_pad = self.reference.talker_prefill(
                sequence, self.speaker, media, thinker=thinker
            )
            n = len(samples)
            fields[PREFILL_EMBEDS] = [prefill.float()] * n
            fields[PREFILL_POSITIONS] = [positions] * n
            fields[TRAILING_TEXT] = [trailing.float()] * n
            fields[TTS_PAD_EMBED] = [tts_pad.float()] * n
            current = self._log_probs(samples, fields)
            kl = (initial.exp() * (initial - current)).sum(-1)  # [n, T]
            lengths = torch.tensor([len(s.response_ids) for s in samples])
            mask = torch.arange(kl.shape[1])[None] < lengths[:, None]
            part = (kl * mask).sum()
            total = part if total is None else total + part
            count += int(lengths.sum())
        assert total is not None
        return total / max(count, 1)

    def measure(self, policy: Any) -> dict[str, float]:
        with torch.no_grad():
            return {"talker/drift_kl": float(self.drift_kl(policy))}

    def penalty(self, policy: Any) -> Tensor:
        return self.drift_kl(policy)

    def speak(self, policy: Any) -> list[ProbeSpeech]:
        """Each probe phrase spoken once by the frozen talker from the thinker inside
        ``policy``; the sampling is seeded per phrase, apart from the caller's stream."""
        thinker = find_thinker(policy)
        spoken = []
        with torch.random.fork_rng(devices=[]):
            for index, (phrase, (sequence, media, _, _)) in enumerate(zip(self.phrases, self.probes, strict=True)):
                torch.manual_seed(self.seed + 1000 + index)
                (sample,) = self.reference.sample_speech(
                    sequence, n=1, max_new_tokens=self.max_new_tokens, media=media, thinker=thinker
                )
                spoken.append(ProbeSpeech(phrase, sample.waveform.numpy(), self.reference.speech_sample_rate))
        return spoken


def find_thinker(policy: Any) -> Any:
    """The thinker inside a thinker policy, under PEFT's wrappers (LoRA layers included)."""
    current = policy
    for _ in range(4):
        thinker = getattr(current, "thinker", None)
        if thinker is not None:
            return thinker
        current = getattr(current, "base_model", None) or getattr(current, "model", None)
        if current is None:
            break
    raise TypeError(f"No thinker found in {type(policy).__name__}.")


def spoken_sequence(processor: Any, phrase: str, seed: int) -> tuple[Tensor, dict[str, Any]]:
    """``[1, S]`` ids -- a picture, a tone and a request to say ``phrase``, then the assistant
    turn holding it -- and the media tensors the thinker reads."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    picture = Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))
    t = np.arange(16_000) / 16_000
    tone = (0.4 * np.sin(2 * np.pi * (220.0 + 110.0 * seed) * t)).astype(np.float32)
    content = [{"type": "image"}, {"type": "audio"}, {"type": "text", "text": f"Say: {phrase}"}]
    text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False)
    inputs = dict(processor(text=[text], images=[picture], audio=[tone], return_tensors="pt"))
    prompt = inputs.pop("input_ids")
    inputs.pop("attention_mask")
    return torch.cat([prompt, torch.tensor([processor.tokenizer.encode(phrase)])], dim=1), inputs
