"""Online RL on speech (``actor_rollout_ref.model.stage=talker``): the speech stage speaks a
given text, and audio rewards (``reward.audio_rewards``) pay the waveforms.

The step's other phases (log-probs, advantages, update) are the text step's: a speech sample
is a rollout sample whose prompt is the speech stage's own prefill ids and whose response is
the trained codebook's tokens, with the conditioning in its extra fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from omni_contracts import RolloutSample
from omni_contracts.speech import SpeechPolicy, find_speech_policy
from omni_rewards.api import ground_truth_text
from omni_rewards.audio import SpeechSample, WeightedAudioReward
from omni_rollout.local_engine import LocalEngine
from omni_rollout.sampling import SamplingSettings
from omni_training.actor import Actor

from omni_trainer.engines.local import speech_task
from omni_trainer.config import Config
from omni_trainer.prompts import (
    BuiltinPrompts,
    DatasetPrompts,
    Prepared,
    PromptSource,
    SpokenPrompts,
    encode_builtin,
    with_spoken_text,
)
from omni_trainer.engines.local.step import Rollouts, Sampler, Scores, StepParts, new_group_ids
from omni_trainer.engines.local.task import LoadedRun, Task


@dataclass
class SpeechSampler(Sampler):
    """Speaks each prompt's text ``n`` times through the speech policy; the audio rewards
    score the waveforms."""

    config: Config
    policy: SpeechPolicy
    rewards: WeightedAudioReward
    speaker: str | None = None  # None: the policy's default voice
    waveforms: list[np.ndarray] = field(default_factory=list)  # the last step's, sample order
    texts: list[str] = field(default_factory=list)

    def rollout(self, prompts: Sequence[Prepared], step: int) -> Rollouts:
        rollout = self.config.actor_rollout_ref.rollout
        return Rollouts(*speech_rollouts(
            self, prompts, new_group_ids(len(prompts)), n=rollout.n,
            max_new_tokens=self.config.data.max_response_length, temperature=rollout.temperature,
        ))

    def score(self, rollouts: Rollouts) -> Scores:
        speech_scores, metrics = score_speech(self, rollouts.owners)
        scores = torch.tensor(speech_scores, dtype=torch.float32)
        return Scores(scores, scores.clone(), metrics)



class SpeechRL(Task):
    """RL of the speech stage on the built-in speech task or RL parquet rows with the text to
    speak (``extra_info.spoken_text``, or the frozen thinker's answer: ``data.spoken_text``).
    It has no validation: its training curve is the measurement."""

    validates = False

    def __init__(self, run: LoadedRun) -> None:
        super().__init__(run)
        self.sampler: SpeechSampler | None = None
        self._answers: LocalEngine | None = None  # data.spoken_text=thinker: the thinker's answers

    def rows(self) -> tuple[PromptSource, list[Prepared]]:
        """The training rows; none to validate on (the pre-flight refused val files)."""
        cfg, run = self.config, self.run
        if cfg.data.train_files is None:
            rows = speech_task.speech_rows(cfg.data.builtin_task_size, seed=cfg.data.seed)
            return BuiltinPrompts(rows, self._encode_speech), []
        if cfg.data.spoken_text == "thinker":
            answers = DatasetPrompts(cfg.data.train_files, run.processor, cfg, require_ground_truth=False)
            return SpokenPrompts(answers, run.tokenizer, self._thinker_answer), []
        spoken = DatasetPrompts(cfg.data.train_files, run.processor, cfg, required_extra_info=("spoken_text",),
                                require_ground_truth=False)
        return SpokenPrompts(spoken, run.tokenizer, lambda p: (p.extra_info or {})["spoken_text"]), []

    def _encode_speech(self, row: dict[str, Any]) -> Prepared:
        """The prompt, then the assistant turn holding the text to speak (no end of turn)."""
        prepared = encode_builtin(self.run.processor, row, self.config.data.max_prompt_length)
        return with_spoken_text(prepared, row["spoken_text"], self.run.tokenizer)

    def _thinker_answer(self, prepared: Prepared) -> str:
        """The frozen thinker's greedy answer to ``prepared`` (``data.spoken_text=thinker``).

        Raises:
            ValueError: the answer is empty: there is nothing to speak.
        """
        tokenizer = self.run.tokenizer
        if self._answers is None:
            turn = tokenizer.convert_tokens_to_ids("<|im_start|>")  # a new turn would end the answer's
            self._answers = self.run.text_engine(self.actor, "thinker_only", also_suppressed=(turn,))
        greedy = SamplingSettings(n=1, temperature=0.0, max_new_tokens=self.config.data.max_spoken_tokens)
        (rollout,) = self._answers.generate([prepared.inputs], greedy)
        text = tokenizer.decode(rollout.outputs[0].token_ids, skip_special_tokens=True).strip()
        if not text:
            raise ValueError(
                f"The thinker's greedy answer to prompt {prepared.index} is empty: nothing to speak. Give the rows "
                "extra_info.spoken_text and set data.spoken_text=extra_info."
            )
        return text

    def build(self, actor: Actor, device: str) -> None:
        """The speech policy (it masks its own control ids in its forward) and its rewards."""
        cfg = self.config
        self.actor = actor
        self.sampler = SpeechSampler(
            cfg, speech_policy(actor.model, cfg.actor_rollout_ref.rollout.speaker),
            WeightedAudioReward(cfg.reward.audio_rewards), speaker=cfg.actor_rollout_ref.rollout.speaker,
        )
        self.parts = StepParts(cfg, self.sampler, actor, self.run.training_adapter)

    def after_step(self, run_dir: Path, step: int, *, first: bool, last: bool) -> None:
        if (first or last) and self.sampler is not None:
            write_speech_samples(run_dir / "samples", step, self.sampler)

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.rewards.close()


def speech_policy(model: Any, speaker: str | None) -> SpeechPolicy:
    """The speech policy in ``model``, checked to speak in ``speaker`` (``None``: its default).

    Raises:
        ValueError: the policy has no such voice; the message lists its voices.
    """
    policy = find_speech_policy(model)
    if speaker is not None and speaker.lower() not in {voice.lower() for voice in policy.speakers}:
        raise ValueError(
            f"actor_rollout_ref.rollout.speaker={speaker!r} is not a voice of this checkpoint; its voices: "
            f"{', '.join(policy.speakers)}."
        )
    return policy


def spoken_text(prepared: Prepared) -> str:
    info = prepared.extra_info or {}
    text = info.get("spoken_text")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"Prompt {prepared.index} has no extra_info['spoken_text'] for the talker to speak.")
    return text


def speech_rollouts(
    speech: SpeechSampler, prompts: Sequence[Prepared], group_ids: Sequence[str], *, n: int,
    max_new_tokens: int, temperature: float,
) -> tuple[list[RolloutSample], list[Prepared], list[str]]:
    """``n`` spoken samples per prompt, each with its owner and its prompt's group id. The
    owner carries the speech prompt (the prefill ids) as its model inputs, and the prompt's
    reward fields. A policy that returns another count is an error: the advantage groups
    would no longer be the prompt's ``n`` samples."""
    samples: list[RolloutSample] = []
    owners: list[Prepared] = []
    groups: list[str] = []
    speech.waveforms, speech.texts = [], []
    for prepared, group in zip(prompts, group_ids, strict=True):
        media = {k: v for k, v in prepared.inputs.items() if k not in ("input_ids", "attention_mask")}
        rollouts = speech.policy.sample_speech(
            prepared.inputs["input_ids"], n=n, max_new_tokens=max_new_tokens, temperature=temperature,
            speaker=speech.speaker, media=media,
        )
        if len(rollouts) != n:
            raise RuntimeError(
                f"{type(speech.policy).__name__}.sample_speech returned {len(rollouts)} samples for prompt "
                f"{prepared.index}, asked for n={n}: a speech policy must return exactly n per call."
            )
        for rollout in rollouts:
            samples.append(RolloutSample(
                prompt_ids=tuple(rollout.prompt_ids), response_ids=tuple(rollout.response_ids),
                response_mask=(1,) * len(rollout.response_ids), response_logprobs=tuple(rollout.response_logprobs),
                extra_fields=dict(rollout.extra_fields),
            ))
            ids = torch.tensor([rollout.prompt_ids])
            owners.append(Prepared(
                {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, prepared.data_source,
                prepared.ground_truth, prepared.index, prepared.extra_info,
            ))
            speech.waveforms.append(np.asarray(rollout.waveform, dtype=np.float32))
            speech.texts.append(spoken_text(prepared))
            groups.append(group)
    return samples, owners, groups


def score_speech(speech: SpeechSampler, owners: Sequence[Prepared]) -> tuple[list[float], dict[str, float]]:
    """The audio rewards of the last rollout's waveforms. Speech that ended before its first
    frame scores 0 and is counted (``speech/empty``): a poor answer, not a scorer failure. A
    failed reward scores 0 and is counted in the reward metrics, never silently."""
    rate = speech.policy.speech_sample_rate
    spoken = [i for i, w in enumerate(speech.waveforms) if w.size > 0]
    result = speech.rewards.score_batch([
        SpeechSample(speech.waveforms[i], rate, speech.texts[i], ground_truth_text(owners[i].ground_truth),
                     owners[i].data_source)
        for i in spoken
    ])
    scores = [0.0] * len(speech.waveforms)
    for i, score in zip(spoken, result.scores, strict=True):
        scores[i] = score
    durations = [w.size / rate for w in speech.waveforms]
    metrics = {
        **result.metrics,
        "speech/duration_s/mean": float(np.mean(durations)) if durations else 0.0,
        "speech/empty": float(len(speech.waveforms) - len(spoken)),
    }
    return scores, metrics


def write_speech_samples(directory: Path, step: int, speech: SpeechSampler, count: int = 4) -> list[Path]:
    """The first ``count`` waveforms of the last rollout as 16-bit WAVs, ``step_<N>_<k>.wav``."""
    from omni_rewards.audio import encode_wav_pcm16

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    spoken = [w for w in speech.waveforms if w.size > 0]  # speech that ended at once has no audio
    for k, waveform in enumerate(spoken[:count]):
        path = directory / f"step_{step:06d}_{k}.wav"
        path.write_bytes(encode_wav_pcm16(waveform, speech.policy.speech_sample_rate))
        written.append(path)
    return written
