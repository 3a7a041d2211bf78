"""The local rollout engine: transformers ``generate`` in this process, on CPU or one GPU.

It samples ``n`` responses per prompt from the policy module itself (the actor's module:
weights are shared, so there is nothing to sync) and returns, per sample, the response
ids, the finish reason, and the log-prob of every sampled token under the distribution
actually sampled from (the processed scores after temperature, top-k and top-p), so that
rollout-vs-actor consistency is measured honestly.

Prompts, text-only and multimodal alike, share left-padded ``generate`` calls
(:func:`batch_prompts` lays out their rows and media). The module may sit on a GPU: prompts
move to its device and results come back to the CPU; our sampler (:class:`NextTokenSampler`)
picks each token and keeps its log-prob, never every step's scores.

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

# What ``generate`` would take from the checkpoint's ``generation_config.json`` that changes
# the distribution sampled from (processors the actor never applies) or the decoding itself
# (beam search, contrastive search, DoLa): the rollout's log-probs would silently stop being
# the policy's. Set to their neutral values.
NEUTRAL_GENERATION_OPTIONS: dict[str, Any] = {
    "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "min_length": 0, "min_new_tokens": None,
    "bad_words_ids": None, "sequence_bias": None, "begin_suppress_tokens": None,
    "forced_bos_token_id": None, "forced_eos_token_id": None, "exponential_decay_length_penalty": None,
    "num_beams": 1, "penalty_alpha": None, "dola_layers": None,
}
SEQUENCE_KEYS = ("input_ids", "attention_mask")  # [1, L] per prompt; left-padded in a batch
TOKEN_TYPE_KEYS = ("mm_token_type_ids",)  # [1, L]: each token's medium (0: text); left-padded with 0
TIME_PADDED_KEYS = ("input_features", "feature_attention_mask")  # [audios, ..., frames]; right-padded


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


def batch_prompts(prompts: Sequence[Mapping[str, Any]], n: int, pad_token_id: int) -> dict[str, Any]:
    """Processor outputs of several prompts (batch dim 1 each) as one ``generate`` batch in
    which each prompt is repeated ``n`` times in a row: rows ``k * n .. k * n + n - 1`` belong
    to prompt ``k``.

    ``input_ids`` and ``attention_mask`` are left-padded to the longest prompt (a model that
    derives its positions from the mask, as Qwen3-Omni's thinker does for mrope, sees each row
    as if alone); mrope ``position_ids [3, 1, L]``, when given, are left-padded too. Media
    tensors have one row per item (``pixel_values`` patches, ``image_grid_thw`` images,
    ``input_features`` audios), which the model consumes in placeholder order, row by row; so
    each prompt's items are repeated ``n`` times and concatenated in prompt order. Audio
    features (``TIME_PADDED_KEYS``) are right-padded along time first; the model reads each
    audio's length from ``feature_attention_mask``. Per-token types (``TOKEN_TYPE_KEYS``:
    transformers' ``mm_token_type_ids``, which Qwen2-VL's mrope reads) are left-padded with 0
    like the mask; a prompt without them (a text-only row) is all text. Other values (flags)
    must agree.

    Raises:
        ValueError: a prompt's ``input_ids`` has more than one row, lacks ``attention_mask``,
            or two prompts disagree on a non-tensor value.
    """
    for number, prompt in enumerate(prompts):
        if int(prompt["input_ids"].shape[0]) != 1:
            raise ValueError(
                f"Prompt {number}: input_ids has batch size {prompt['input_ids'].shape[0]}; pass one prompt at a time."
            )
        if "attention_mask" not in prompt:
            raise ValueError(f"Prompt {number} lacks attention_mask; pass the processor's output for it.")
    length = max(int(prompt["input_ids"].shape[1]) for prompt in prompts)
    batch: dict[str, Any] = {
        "input_ids": _left_pad([p["input_ids"] for p in prompts], length, pad_token_id).repeat_interleave(n, dim=0),
        "attention_mask": _left_pad([p["attention_mask"] for p in prompts], length, 0).repeat_interleave(n, dim=0),
    }
    for key in TOKEN_TYPE_KEYS:
        if any(prompt.get(key) is not None for prompt in prompts):
            types = [p[key] if p.get(key) is not None else torch.zeros_like(p["input_ids"]) for p in prompts]
            batch[key] = _left_pad(types, length, 0).repeat_interleave(n, dim=0)
    keys = list(dict.fromkeys(
        key for prompt in prompts for key in prompt if key not in (*SEQUENCE_KEYS, *TOKEN_TYPE_KEYS)
    ))
    for key in keys:
        values = [prompt[key] for prompt in prompts if prompt.get(key) is not None]
        if not values:
            continue
        if not isinstance(values[0], Tensor):
            if any(value != values[0] for value in values[1:]):
                raise ValueError(f"Prompts disagree on {key!r} ({values}); batch prompts that share it.")
            batch[key] = values[0]
        elif key == "position_ids":
            if len(values) != len(prompts):
                raise ValueError("Some prompts have position_ids and some do not; give them for all or none.")
            batch[key] = _batch_positions(values, length, n)
        else:
            if key in TIME_PADDED_KEYS:
                frames = max(int(value.shape[-1]) for value in values)
                values = [torch.nn.functional.pad(value, (0, frames - int(value.shape[-1]))) for value in values]
            batch[key] = torch.cat([value for value in values for _ in range(n)])
    return batch


def _left_pad(rows: Sequence[Tensor], length: int, value: int) -> Tensor:
    """``[1, L_i]`` rows -> ``[len(rows), length]``, padded on the left with ``value``."""
    return torch.cat([torch.nn.functional.pad(row, (length - int(row.shape[-1]), 0), value=value) for row in rows])


def _batch_positions(positions: Sequence[Tensor], length: int, n: int) -> Tensor:
    """``[3, 1, L_i]`` (mrope) or ``[1, L_i]`` per prompt -> ``[3, B * n, length]`` or
    ``[B * n, length]``; the padding positions (masked out) are 1, as the model's own."""
    padded = [torch.nn.functional.pad(pos, (length - int(pos.shape[-1]), 0), value=1) for pos in positions]
    axis = 1 if padded[0].dim() == 3 else 0
    return torch.cat(padded, dim=axis).repeat_interleave(n, dim=axis)


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
        prompts_per_call: the most prompts one ``generate`` call batches (``None``: all of
            them); bounds the memory of a call (``prompts_per_call * n`` rows and their media).
        autocast_dtype: the dtype ``generate`` computes in under ``torch.autocast``, for a
            module whose weights are wider (a full fine-tune's float32 master weights compute
            in bf16, as the actor's forward does); ``None``: in the weights' own dtype.
    """

    module: Any
    eos_token_ids: tuple[int, ...]
    pad_token_id: int
    stage_id: int = 0
    suppress_token_ids: tuple[int, ...] = ()
    prompts_per_call: int | None = None
    autocast_dtype: torch.dtype | None = None
    stats: GenerationStats = field(default_factory=GenerationStats)

    def __post_init__(self) -> None:
        if self.prompts_per_call is not None and self.prompts_per_call < 1:
            raise ValueError(f"prompts_per_call must be >= 1 or None (all prompts), got {self.prompts_per_call}.")

    def generate(self, prompts: Sequence[Mapping[str, Any]], sampling: SamplingSettings) -> list[PromptRollout]:
        """``sampling.n`` samples for each prompt (a processor output with batch dim 1).

        Prompts share left-padded ``generate`` calls (text-only and multimodal alike, see
        :func:`batch_prompts`) of at most ``prompts_per_call`` prompts each; a call whose
        first prompt is ``prompts[i]`` is seeded with ``sampling.seed + i``. So the same
        prompts with the same settings and seed give the same samples; a prompt's samples
        depend on the other prompts of its call (the call draws from one random stream), as
        with any batched sampler. Greedy decoding gives every prompt the tokens it would get
        alone (up to float rounding of the padded batch).
        """
        rollouts: list[PromptRollout] = []
        started = time.perf_counter()
        size = self.prompts_per_call or max(len(prompts), 1)
        for first in range(0, len(prompts), size):
            rollouts.extend(self._generate(prompts[first : first + size], first, sampling))
        self.stats.seconds += time.perf_counter() - started
        self.stats.prompts += len(prompts)
        return rollouts

    def _generate(
        self, prompts: Sequence[Mapping[str, Any]], seed_index: int, sampling: SamplingSettings
    ) -> list[PromptRollout]:
        """One ``generate`` call for ``prompts``, seeded with ``sampling.seed + seed_index``."""
        from transformers import LogitsProcessorList

        stops = tuple(dict.fromkeys((*self.eos_token_ids, *sampling.stop_token_ids)))
        device = _device_of(self.module)
        # Media features follow the model's dtype (a bf16 audio tower does not cast fp32 input).
        dtype = self.module.get_input_embeddings().weight.dtype
        inputs = {
            key: value.to(device, dtype=dtype if value.is_floating_point() else value.dtype)
            if isinstance(value, Tensor) else value
            for key, value in batch_prompts(prompts, sampling.n, self.pad_token_id).items()
        }
        prompt_len = int(inputs["input_ids"].shape[1])
        sampler = NextTokenSampler(greedy=sampling.greedy)
        # Temperature, top-k and top-p run as our processors, then our sampler picks the token;
        # generate runs greedy over its point mass (greedy: its own warpers never run).
        options: dict[str, Any] = {
            "max_new_tokens": sampling.max_new_tokens,
            "eos_token_id": list(stops),
            "pad_token_id": self.pad_token_id,
            "return_dict_in_generate": True,
            "do_sample": False,
            **NEUTRAL_GENERATION_OPTIONS,
            "logits_processor": LogitsProcessorList([*_warpers(sampling), sampler]),
        }
        if self.suppress_token_ids:
            options["suppress_tokens"] = list(self.suppress_token_ids)
        rng_devices = [device] if device.type == "cuda" else []
        # Eval mode while sampling: no dropout, and the KV cache stays on (transformers turns
        # it off in training mode when gradient checkpointing is enabled).
        was_training = self.module.training
        self.module.eval()
        # generate reads the last position's logits only (prefill included): the LM head
        # projects that one; the prompt's [rows, L, V] logits were the rollout's largest tensor.
        head = self.module.get_output_embeddings()
        last_only = head.register_forward_pre_hook(_last_position_only) if head is not None else None
        try:
            with torch.random.fork_rng(devices=rng_devices), torch.no_grad(), torch.autocast(
                device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None
            ):
                if sampling.seed is not None:
                    torch.manual_seed(sampling.seed + seed_index)
                out = self.module.generate(**inputs, **options)
        finally:
            self.module.train(was_training)
            if last_only is not None:
                last_only.remove()
        tokens = out.sequences[:, prompt_len:]  # [prompts * n, T]
        log_probs = sampler.finish(tokens).cpu()  # [prompts * n, T]
        tokens = tokens.cpu()
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


class NextTokenSampler:
    """The last logits processor of a ``generate`` call: it picks each row's next token from
    the processed distribution (the scores after temperature, top-k and top-p), records that
    token's log-prob under it, and returns a point mass at the pick, so ``generate`` runs
    greedy and takes it.

    Sampling draws one uniform per row and searches the row's cumulative distribution
    (inverse-CDF sampling). ``generate``'s own sampler, ``torch.multinomial``, draws one
    exponential variate per vocabulary entry instead: on the CPU that was the largest single
    cost of a tiny-model rollout (5 ms per step for 64 rows x 4096 tokens, 20x the search).
    It keeps one step's log-probs per row (``[rows]``), never a step's full distribution.
    """

    def __init__(self, *, greedy: bool) -> None:
        self.greedy = greedy
        self.log_probs: list[Tensor] = []  # [rows] per generated position

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        log_probs = torch.log_softmax(scores.float(), dim=-1)
        chosen = log_probs.argmax(-1, keepdim=True) if self.greedy else sample_categorical(log_probs)
        self.log_probs.append(log_probs.gather(-1, chosen).squeeze(-1))
        return torch.full_like(scores, float("-inf")).scatter_(-1, chosen, 0.0)

    def finish(self, tokens: Tensor) -> Tensor:
        """``[rows, T]`` log-probs of ``tokens`` (the generated part of the sequences)."""
        if len(self.log_probs) != tokens.shape[1]:
            raise RuntimeError(f"Recorded {len(self.log_probs)} steps for {tokens.shape[1]} generated tokens.")
        return torch.stack(self.log_probs, dim=1)


def sample_categorical(log_probs: Tensor) -> Tensor:
    """One draw per row of ``[rows, V]`` log-probs, as ``[rows, 1]`` ids: the first entry whose
    cumulative probability (summed in float64) exceeds a uniform draw scaled to the row's
    total. Such an entry has positive probability; a draw that rounding puts at the total
    itself takes the row's last entry of positive probability, so a token of probability 0
    (suppressed, or cut by top-k/top-p) is never drawn."""
    probs = log_probs.exp()
    cdf = probs.cumsum(-1, dtype=torch.float64)
    draw = torch.rand((probs.shape[0], 1), device=probs.device, dtype=cdf.dtype) * cdf[:, -1:]
    chosen = torch.searchsorted(cdf, draw, right=True)
    past_end = chosen == probs.shape[-1]
    if past_end.any():
        last_possible = probs.shape[-1] - 1 - (probs > 0).flip(-1).int().argmax(-1, keepdim=True)
        chosen = torch.where(past_end, last_possible, chosen)
    return chosen


def _last_position_only(module: Any, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    hidden, *rest = inputs
    return (hidden[:, -1:], *rest)


def _warpers(sampling: SamplingSettings) -> list[Any]:
    """Temperature, top-k, top-p, in ``generate``'s order; none for greedy decoding."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    if sampling.greedy:
        return []
    warpers: list[Any] = []
    if sampling.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_k > 0:
        warpers.append(TopKLogitsWarper(sampling.top_k))
    if sampling.top_p < 1.0:
        warpers.append(TopPLogitsWarper(sampling.top_p))
    return warpers


def _device_of(module: Any) -> torch.device:
    """Where ``module``'s weights are: prompts move there, results come back to the CPU."""
    for parameter in module.parameters():
        return torch.device(parameter.device)
    return torch.device("cpu")


def _trim(tokens: Tensor, log_probs: Tensor, stops: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[float, ...], str]:
    """Cut a generated row after its first stop token (kept); the rest is padding."""
    ids = tokens.tolist()
    for position, token in enumerate(ids):
        if token in stops:
            end = position + 1
            return tuple(ids[:end]), tuple(log_probs[:end].tolist()), "stop"
    return tuple(ids), tuple(log_probs.tolist()), "length"
