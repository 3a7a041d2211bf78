"""The local rollout engine: transformers ``generate`` in this process, on CPU or one GPU.

It samples ``n`` responses per prompt from the policy module itself (the actor's module:
weights are shared, so there is nothing to sync) and returns, per sample, the response
ids, the finish reason, and the log-prob of every sampled token under the distribution
actually sampled from (the processed scores after temperature, top-k and top-p), so that
rollout-vs-actor consistency is measured honestly.

The module that generates is the rollout adapter's policy stage: the submodule whose class
is the policy stage's ``model_arch`` (the thinker of Qwen3-Omni), or the model itself.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from omni_contracts import RolloutAdapter, StageOutput
from omni_rollout.sampling import SamplingSettings

BATCH_FIRST_KEYS = ("input_ids", "attention_mask", "input_features", "feature_attention_mask")
TEXT_KEYS = ("input_ids", "attention_mask")


def find_policy_module(model: Any, adapter: RolloutAdapter, mode: str) -> Any:
    """The submodule that runs the policy stage of ``mode``.

    Raises:
        LookupError: no submodule is an instance of the stage's ``model_arch``.
    """
    stages = {stage.stage_id: stage for stage in adapter.build_stage_configs(mode)}
    arch = stages[adapter.policy_stage_id(mode)].model_arch
    seen = []
    for module in model.modules():
        name = type(module).__name__
        if name == arch:
            return module
        seen.append(name)
    raise LookupError(
        f"No submodule of {type(model).__name__} is a {arch} (the policy stage of mode {mode!r}); "
        f"top-level classes seen: {sorted(set(seen))[:12]}."
    )


def repeat_prompt(inputs: Mapping[str, Any], n: int) -> dict[str, Any]:
    """One prompt's processor output (batch dim 1) repeated ``n`` times.

    Batch-first tensors repeat along dim 0; mrope ``position_ids [3, 1, L]`` along dim 1;
    other tensors (``pixel_values``, grids: per-item rows) are concatenated ``n`` times.
    """
    repeated: dict[str, Any] = {}
    for key, value in inputs.items():
        if not isinstance(value, Tensor):
            repeated[key] = value
        elif key in BATCH_FIRST_KEYS:
            if value.shape[0] != 1:
                raise ValueError(f"{key} has batch size {value.shape[0]}; pass one prompt at a time.")
            repeated[key] = value.repeat(n, *([1] * (value.dim() - 1)))
        elif key == "position_ids":
            repeated[key] = value.repeat(1, n, 1) if value.dim() == 3 else value.repeat(n, 1)
        else:
            repeated[key] = torch.cat([value] * n)
    return repeated


@dataclass(frozen=True)
class PromptRollout:
    """The ``n`` samples of one prompt."""

    prompt_ids: tuple[int, ...]
    outputs: tuple[StageOutput, ...]  # one per sample; data["finish_reason"] is "stop" or "length"


@dataclass
class GenerationStats:
    prompts: int = 0
    samples: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0

    def metrics(self) -> dict[str, float]:
        seconds = max(self.seconds, 1e-9)
        return {
            "rollout/prompts_per_s": self.prompts / seconds,
            "rollout/tokens_per_s": self.generated_tokens / seconds,
            "rollout/generate_time_s": self.seconds,
            "rollout/samples": float(self.samples),
        }


@dataclass
class LocalEngine:
    """Samples responses with ``generate`` on ``module`` (usually :func:`find_policy_module`).

    Args:
        module: a transformers model with ``generate``.
        stage_id: the policy stage's id, recorded in each :class:`StageOutput`.
        eos_token_ids: ids that end a response (the tokenizer's end-of-turn token).
        pad_token_id: fills finished rows while others continue.
        suppress_token_ids: ids never sampled (multimodal placeholders: a sampled
            ``<|audio_pad|>`` in a response would be read as an audio slot by the actor).
    """

    module: Any
    eos_token_ids: tuple[int, ...]
    pad_token_id: int
    stage_id: int = 0
    suppress_token_ids: tuple[int, ...] = ()
    stats: GenerationStats = field(default_factory=GenerationStats)

    def generate(self, prompts: Sequence[Mapping[str, Any]], sampling: SamplingSettings) -> list[PromptRollout]:
        """``sampling.n`` samples for each prompt (a processor output with batch dim 1).

        Text-only prompts share one left-padded ``generate`` call; a prompt with media
        (pixel values, audio features, precomputed positions) gets a call of its own.
        """
        rollouts: list[PromptRollout | None] = [None] * len(prompts)
        started = time.perf_counter()
        text_only = [i for i, prompt in enumerate(prompts) if set(prompt) <= set(TEXT_KEYS)]
        if len(text_only) > 1:
            batched = self._generate([prompts[i] for i in text_only], text_only[0], sampling)
            for index, rollout in zip(text_only, batched, strict=True):
                rollouts[index] = rollout
        for index, prompt in enumerate(prompts):
            if rollouts[index] is None:
                (rollouts[index],) = self._generate([prompt], index, sampling)
        self.stats.seconds += time.perf_counter() - started
        self.stats.prompts += len(prompts)
        return [rollout for rollout in rollouts if rollout is not None]

    def _generate(
        self, prompts: Sequence[Mapping[str, Any]], seed_index: int, sampling: SamplingSettings
    ) -> list[PromptRollout]:
        """One ``generate`` call for ``prompts`` (several only when text-only), seeded with
        ``sampling.seed + seed_index``."""
        stops = tuple(dict.fromkeys((*self.eos_token_ids, *sampling.stop_token_ids)))
        inputs = (
            repeat_prompt(prompts[0], sampling.n)
            if len(prompts) == 1
            else _left_padded_text_batch(prompts, sampling.n, self.pad_token_id)
        )
        prompt_len = int(inputs["input_ids"].shape[1])
        options: dict[str, Any] = {
            "max_new_tokens": sampling.max_new_tokens,
            "eos_token_id": list(stops),
            "pad_token_id": self.pad_token_id,
            "output_scores": True,
            "return_dict_in_generate": True,
            "do_sample": not sampling.greedy,
        }
        if self.suppress_token_ids:
            options["suppress_tokens"] = list(self.suppress_token_ids)
        if not sampling.greedy:
            options.update(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k if sampling.top_k > 0 else 0,
            )
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            if sampling.seed is not None:
                torch.manual_seed(sampling.seed + seed_index)
            out = self.module.generate(**inputs, **options)
        tokens = out.sequences[:, prompt_len:]  # [prompts * n, T]
        scores = torch.stack(out.scores, dim=1).float()  # [prompts * n, T, V], processed
        log_probs = torch.log_softmax(scores, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        rollouts = []
        for number, prompt in enumerate(prompts):
            samples = []
            for row in range(number * sampling.n, (number + 1) * sampling.n):
                ids, lps, reason = _trim(tokens[row], log_probs[row], stops)
                self.stats.generated_tokens += len(ids)
                samples.append(
                    StageOutput(self.stage_id, token_ids=ids, logprobs=lps, finished=True, data={"finish_reason": reason})
                )
            self.stats.samples += len(samples)
            prompt_ids = tuple(int(t) for t in prompt["input_ids"][0])
            rollouts.append(PromptRollout(prompt_ids, tuple(samples)))
        return rollouts


def _left_padded_text_batch(prompts: Sequence[Mapping[str, Any]], n: int, pad_token_id: int) -> dict[str, Tensor]:
    """Text-only prompts (batch dim 1 each), left-padded to one length, each repeated ``n``
    times in a row: rows ``k * n .. k * n + n - 1`` belong to prompt ``k``."""
    length = max(int(prompt["input_ids"].shape[1]) for prompt in prompts)
    ids, masks = [], []
    for prompt in prompts:
        pad = length - int(prompt["input_ids"].shape[1])
        ids.append(torch.nn.functional.pad(prompt["input_ids"], (pad, 0), value=pad_token_id))
        masks.append(torch.nn.functional.pad(prompt["attention_mask"], (pad, 0), value=0))
    return {
        "input_ids": torch.cat(ids).repeat_interleave(n, dim=0),
        "attention_mask": torch.cat(masks).repeat_interleave(n, dim=0),
    }


def _trim(tokens: Tensor, log_probs: Tensor, stops: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[float, ...], str]:
    """Cut a generated row after its first stop token (kept); the rest is padding."""
    ids = tokens.tolist()
    for position, token in enumerate(ids):
        if token in stops:
            end = position + 1
            return tuple(ids[:end]), tuple(log_probs[:end].tolist()), "stop"
    return tuple(ids), tuple(log_probs.tolist()), "length"
