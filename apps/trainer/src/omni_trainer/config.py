"""The trainer's configuration: typed sections under verl's names, validated at once.

Precedence: the packaged defaults (``omni_trainer.yaml``) -> a run script's overrides ->
extra ``"$@"`` arguments (later wins). Overrides are dotted ``key=value`` pairs; values are
parsed as YAML (``8``, ``3e-6``, ``[a,b]``, ``null``). An unknown key or a value of the
wrong type is an error naming the key and, when one is close, the key it most likely meant
(:func:`closest_keys`). verl's keys that only the verl engine reads are here too, ``None`` when
unset; the local engine honours or refuses each (``omni_trainer.engines.local.verl_keys``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, InterpolationResolutionError, ValidationError

from omni_trainer.files import checkpoint
from omni_trainer.foreign_keys import foreign_message
from omni_trainer.keys import MAPPED, NOT_SENT, actor_value, any_value, choice_problems, key, section
from omni_trainer.loggers import LOGGERS
from omni_trainer.model_folder import model_fingerprint


def log_prob_sizing(what: str, actor_key: str, **declaration: Any) -> Any:
    """A sizing key of verl's reference or old log-prob pass (``None``: the actor's, as verl's
    defaults): verl-only, honoured by the local engine when equal to the actor's ``actor_key``."""
    return key(None, f"sizing of verl's {what} log-prob pass", engines="verl",
               other_engine=f"computes {what} log-prob on the update's micro-batches (honours "
                            f"actor_rollout_ref.actor.{actor_key})",
               honoured=actor_value(actor_key), **declaration)


@dataclass
class CustomClassConfig:
    """verl's ``data.custom_cls``: a dataset class by file path and name."""

    path: str | None = key(
        None, "verl's dataset class by file path (verl-omni's QwenOmniRLHFDataset is replaced by ours)", verl=MAPPED)
    name: str | None = key(None, "the dataset class's name in data.custom_cls.path", verl=MAPPED)


@dataclass
class SamplerConfig:
    """verl's ``data.train_sampler`` / ``data.val_sampler``: a batch sampler by file path and
    class name, and its keyword arguments. Offline preference runs honour verl-omni's
    ``ModalityGroupedBatchSampler`` (``sampler_kwargs``: ``batch_size``, ``drop_last``,
    ``num_batches``, ``modality_sample_weights``, ``replacement``, ``shuffle``, ``seed``)."""

    class_path: str | None = key(None, "a batch sampler by file path (offline preference runs)", verl=NOT_SENT)
    class_name: str | None = key(
        None, "the batch sampler's class name (verl-omni's ModalityGroupedBatchSampler)", verl=NOT_SENT)
    sampler_kwargs: dict[str, Any] = key({}, "the batch sampler's keyword arguments", verl=NOT_SENT)


@dataclass
class DataConfig:
    train_files: list[str] | None = key(
        None, "parquet files of training rows (verl's RL schema; one path is taken too); null: the built-in task",
        verl=MAPPED)
    val_files: list[str] | None = key(None, "parquet files of validation rows; null: no validation", verl=MAPPED)
    train_batch_size: int = key(
        8, "prompts per step; 0 only with verl's fully-async streaming (async_training.max_staleness >= 2), where a "
        "step is ppo_mini_batch_size x async_training.require_batches", at_least=0)
    val_batch_size: int = key(16, "prompts per validation batch", at_least=1)
    max_prompt_length: int = key(
        1024, "prompt tokens at most; longer prompts are filtered, counted and reported", at_least=1)
    max_response_length: int = key(64, "response tokens at most per sample", at_least=1)
    shuffle: bool = key(True, "shuffle the train rows each epoch")
    seed: int = key(0, "the seed of the data order (both engines)")
    builtin_task_size: int = key(256, "rows of the built-in task (no data.train_files)", at_least=1, verl=NOT_SENT)
    on_bad_row: str = key(
        "raise",
        "a row that cannot be loaded: raise, or skip it (counted in the step output and summary.txt; read by our "
        "dataset class under verl)",
        choices=("raise", "skip"))
    spoken_text: str = key(
        "extra_info",
        "stage=talker with train files, what each row's speech says: the row's extra_info.spoken_text, or the "
        "thinker's greedy answer to the prompt (at most max_spoken_tokens tokens), as a thinker -> talker pipeline "
        "would speak it",
        choices=("extra_info", "thinker"), verl=NOT_SENT)
    max_spoken_tokens: int = key(
        64, "stage=talker, data.spoken_text=thinker: the thinker's answer's tokens at most", at_least=1, verl=NOT_SENT)
    mm_processor_kwargs: dict[str, Any] = key(
        {}, "extra keyword arguments of the model's processor (fps, ...)", verl=MAPPED)
    use_audio_in_video: bool = key(
        False,
        "hear each video's soundtrack: its audio chunks interleaved with its frames in time, as Qwen-Omni's processor "
        "lays them out (verl-omni's data.mm_processor_kwargs.use_audio_in_video says the same); a video without "
        "sound is a bad row (no_soundtrack, see data.on_bad_row)", verl=MAPPED)
    soundtrack_as_audio: bool = key(
        False,
        "hear each video's soundtrack as an audio item of its own, right after the video (not interleaved with the "
        "frames), as verl-omni's NextQARLHFDataset does (data.custom_cls.name=NextQARLHFDataset says the same); "
        "exclusive with data.use_audio_in_video; a video without sound is a bad row (no_soundtrack)", verl=MAPPED)
    custom_cls: CustomClassConfig = field(default_factory=CustomClassConfig)
    # verl's dataset keys: None is verl's default, or ours where the help says so.
    truncation: str | None = key(
        None, "what verl's dataset does with an overlong prompt; verl 0.9.1 reads it and applies nothing",
        engines="verl",
        other_engine="drops overlong prompts and truncates none (honours error; offline preference runs honour every "
                     "value: how a long answer is cut)",
        honoured=lambda value, config: (value == "error" or config.algorithm.sample_source == "offline"))
    filter_overlong_prompts: bool | None = key(
        None, "drop prompts over data.max_prompt_length; null: true (verl's default is false)", engines="verl",
        other_engine="always drops them, counted in the step line (honours true)",
        honoured=(True,), verl=MAPPED)
    filter_overlong_prompts_workers: int | None = key(
        None, "processes verl's dataset filters with", engines="verl",
        other_engine="filters in its one process (honours 1)",
        honoured=(1,))
    val_max_samples: int | None = key(
        None, "how many validation rows verl uses, -1 for all", engines="verl",
        other_engine="validates the first data.val_batch_size rows; set data.val_batch_size instead (offline "
                     "preference runs honour it: validation pairs, split over the modalities)",
        honoured=lambda value, config: config.algorithm.sample_source == "offline")
    validation_shuffle: bool | None = key(
        None, "shuffle the validation rows", engines="verl", other_engine="validates in file order (honours false)",
        honoured=(False,))
    # Offline preference runs (algorithm.sample_source=offline), verl-omni's keys: every batch
    # holds one modality (the sampler), and data.val_max_samples is split evenly over them.
    train_sampler: SamplerConfig = field(default_factory=SamplerConfig)
    val_sampler: SamplerConfig = field(default_factory=SamplerConfig)
    balance_max_samples_by_modality: bool = key(
        False, "offline preference runs: split data.val_max_samples evenly over the modalities", verl=NOT_SENT)

    @property
    def hears_soundtracks(self) -> bool:
        """Videos are heard with their soundtracks (interleaved with the frames, or as audio items)."""
        return self.use_audio_in_video or self.soundtrack_as_audio


@dataclass
class LoraSection:
    """verl's ``model.lora`` section (its Megatron LoRA keys are not taken)."""

    merge: bool | None = key(
        None, "merge the adapter into the base weights before each sync to the rollout; null: true with LoRA "
        "(vLLM-Omni cannot serve an adapter for the policy stage)", engines="verl",
        other_engine="samples from the training model with its adapter applied, which either setting gives verl's "
                     "rollout",
        honoured=any_value, verl=MAPPED)


@dataclass
class ModelConfig:
    path: str | None = key(
        None, "the checkpoint to train (a Hugging Face folder); null: the tiny Qwen3-Omni, built offline", verl=MAPPED)
    stage: str = key("thinker", "the trained stage: thinker (text out) or talker (speech codes out)", verl=NOT_SENT)
    lora_rank: int = key(16, "LoRA rank; 0: full fine-tuning", at_least=0)
    lora_alpha: int = key(32, "LoRA alpha (the update is scaled by alpha / rank)", above=0)
    lora_dropout: float = key(
        0.0, "dropout on the LoRA path", engines="local",
        other_engine="builds its FSDP LoRA (verl 0.9.1) without dropout (honours 0)",
        honoured=(0.0,), verl=NOT_SENT)
    target_modules: list[str] | None = key(
        None, "LoRA's target modules; null: the model adapter's defaults", verl=MAPPED)
    exclude_modules: str | None = key(None, "a regex of modules LoRA leaves out", verl=MAPPED)
    target_parameters: list[str] | None = key(
        None, "LoRA on nn.Parameters by name (PEFT's target_parameters), e.g. a MoE's fused experts (verl-omni's "
        "recipe: [gate_up_proj, down_proj]); exclude_modules applies to their modules", verl=MAPPED)
    freeze_vision_tower: bool = key(True, "keep the vision encoder frozen", verl=NOT_SENT)
    freeze_audio_tower: bool = key(True, "keep the audio encoder frozen", verl=NOT_SENT)
    use_remove_padding: bool = key(
        False, "packed, padding-free forward, which needs flash-attn 2 (not in the lock)", engines="verl",
        other_engine="pads its micro-batches (honours false)",
        honoured=(False,))
    enable_gradient_checkpointing: bool = key(
        True, "decoder layers recompute their forward in the backward pass instead of keeping activations (verl's "
        "default; `trainer doctor` shows what it saves)")
    external_lib: str | None = key(
        None, "a module verl imports in every worker before building the model", engines="verl",
        other_engine="finds model code through the omni_rl.models entry points; install the package instead")
    lora_dtype: str | None = key(
        None, "verl-omni: the dtype the LoRA parameters are cast to once built; null: the base's (fp32 unless "
        "fsdp_config.model_dtype says otherwise)", engines="verl",
        other_engine="keeps LoRA parameters in float32 (honours float32)",
        honoured=('float32', 'fp32'), verl=MAPPED)
    lora: LoraSection = field(default_factory=LoraSection)
    override_config: dict[str, Any] = key(
        {}, "overrides of the checkpoint's HF config at load, on top of ours: {attn_implementation: sdpa}",
        engines="verl",
        other_engine="loads the checkpoint's config as it is, with transformers' sdpa attention (honours "
                     "attn_implementation=sdpa)",
        honoured=lambda value, config: dict(value) in ({}, {"attn_implementation": "sdpa"}), verl=MAPPED)


@dataclass
class PolicyLossSection:
    loss_mode: str = key("gspo", "the policy loss, by its registered name (gspo, cispo, ...)")


@dataclass
class OptimConfig:
    lr: float = key(3e-6, "AdamW's learning rate", above=0)
    weight_decay: float = key(0.01, "AdamW's weight decay")
    lr_warmup_steps: int = key(
        0, "steps of linear warm-up; 0: none; -1 (verl's default): lr_warmup_steps_ratio of the training steps",
        at_least=-1, verl=MAPPED)
    lr_warmup_steps_ratio: float = key(
        0.0, "with lr_warmup_steps=-1, the share of the training steps that warm up (verl's key and rounding)",
        at_least=0, at_most=1)
    lr_scheduler_type: str = key("constant", "the learning-rate schedule after warm-up", choices=("constant", "cosine"))
    min_lr_ratio: float = key(0.0, "the cosine schedule's last learning rate, as a share of lr", at_least=0, at_most=1)
    clip_grad: float | None = key(
        None, "verl's spelling of actor_rollout_ref.actor.grad_clip (folded into it)", verl=MAPPED)


@dataclass
class FsdpConfig:
    """verl engine: verl's ``actor.fsdp_config`` offload switches, passed to verl as they are
    (the local engine keeps the actor on its one device and refuses them). Colocated with
    the rollout, they free the GPU for vLLM's memory share (verl-omni's Qwen3-Omni recipes set
    both on 80 GB GPUs)."""

    param_offload: bool = key(
        False, "the FSDP actor's parameters and gradients wait on the CPU while it is idle", engines="verl",
        other_engine="keeps its actor on its one device (honours false)",
        honoured=(False,))
    optimizer_offload: bool = key(
        False, "the optimizer state waits on the CPU outside the optimizer step", engines="verl",
        other_engine="keeps its actor on its one device, optimizer state included (honours false)",
        honoured=(False,))
    model_dtype: str | None = key(
        None, "the dtype FSDP holds the actor's parameters in; null: fp32 (a bf16 base gives a bf16 LoRA adapter, "
        "see model.lora_dtype)", engines="verl",
        other_engine="sets precision with actor_rollout_ref.actor.dtype",
        verl=MAPPED)
    use_orig_params: bool | None = key(
        None, "FSDP1's original-parameter switch", engines="verl", other_engine="has no FSDP")
    use_torch_compile: bool | None = key(
        None, "torch.compile of the FSDP engine's entropy kernel; null: verl's true", engines="verl",
        other_engine="runs eagerly (honours false)",
        honoured=(False,))


@dataclass
class RefFsdpConfig:
    param_offload: bool | None = key(
        None, "the reference model's parameters wait on the CPU", engines="verl",
        other_engine="keeps the reference on its one device (honours false)",
        honoured=(False,))
    model_dtype: str | None = key(
        None, "the dtype FSDP holds the reference's parameters in; null: fp32, as the actor's", engines="verl",
        other_engine="sets precision with actor_rollout_ref.actor.dtype",
        verl=MAPPED)


@dataclass
class RefConfig:
    """verl's ``actor_rollout_ref.ref``: the reference policy's forward (KL), verl engine. Its
    sizing keys default to the actor's (``ppo_micro_batch_size_per_gpu``, ``use_dynamic_bsz``,
    ``ppo_max_token_len_per_gpu``), which is how the local engine sizes every forward."""

    strategy: str | None = key(
        None, "the FSDP version of the reference model", engines="verl", other_engine="has no FSDP")
    fsdp_config: RefFsdpConfig = field(default_factory=RefFsdpConfig)
    log_prob_micro_batch_size_per_gpu: int | None = log_prob_sizing(
        "reference", "ppo_micro_batch_size_per_gpu", verl=MAPPED)
    log_prob_use_dynamic_bsz: bool | None = log_prob_sizing("reference", "use_dynamic_bsz")
    log_prob_max_token_len_per_gpu: int | None = log_prob_sizing("reference", "ppo_max_token_len_per_gpu")


@dataclass
class OmniLossConfig:
    """verl-omni's ``actor_rollout_ref.actor.omni_loss``: the offline preference loss."""

    loss_mode: str = key("dpo", "verl-omni's offline preference loss family (dpo)", verl=NOT_SENT)
    loss_type: str = key("sigmoid", "the preference loss (omni_training.preference.PREFERENCE_LOSSES)", verl=NOT_SENT)
    beta: float = key(0.1, "the preference loss's temperature (DPO's beta)", verl=NOT_SENT)
    label_smoothing: float = key(
        0.0, "sigmoid/simpo: conservative DPO's smoothing; robust: the flip rate", verl=NOT_SENT)
    average_log_prob: bool = key(False, "per-token mean log-probs instead of sums", verl=NOT_SENT)
    simpo_gamma: float = key(0.5, "simpo's target reward margin (TRL's name)", verl=NOT_SENT)
    refer_model_precision: str | None = key(
        None, "verl-omni declares it and reads it nowhere; accepted as such", verl=NOT_SENT)


@dataclass
class ActorConfig:
    strategy: str = key(
        "fsdp2", "the FSDP version that shards the actor, fsdp or fsdp2", choices=("fsdp", "fsdp2"), engines="verl",
        other_engine="trains one unsharded model")
    fsdp_config: FsdpConfig = field(default_factory=FsdpConfig)
    freeze_vision_tower: bool | None = key(
        None, "verl's spelling of actor_rollout_ref.model.freeze_vision_tower (folded into it)", verl=MAPPED)
    # verl 0.9.1's FSDP engine reads the fsdp_config copies, which the translation sets too.
    entropy_from_logits_with_chunking: bool | None = key(
        None, "entropy over vocabulary chunks, to save memory", engines="verl",
        other_engine="computes entropy in one piece (honours false)",
        honoured=(False,))
    entropy_from_logits_chunk_size: int | None = key(
        None, "the chunk size of chunked entropy", engines="verl", other_engine="does not chunk entropy")
    policy_loss: PolicyLossSection = field(default_factory=PolicyLossSection)
    clip_ratio: float = key(0.2, "PPO's clip range around a ratio of 1", at_least=0)
    clip_ratio_low: float | None = key(None, "the clip range below 1; null: clip_ratio", at_least=0, verl=MAPPED)
    clip_ratio_high: float | None = key(None, "the clip range above 1; null: clip_ratio", at_least=0, verl=MAPPED)
    clip_ratio_c: float = key(3.0, "dual-clip PPO's bound on the ratio of a negative-advantage token")
    loss_agg_mode: str = key("seq-mean-token-mean", "how token losses aggregate into a sample's and the step's loss")
    loss_scale_factor: int | None = key(
        None, "seq-mean-token-sum-norm (Dr.GRPO) divides by this constant; null: data.max_response_length", verl=MAPPED)
    ppo_mini_batch_size: int = key(8, "prompts per optimizer step", at_least=1)
    ppo_micro_batch_size_per_gpu: int = key(16, "samples per forward/backward", at_least=1, verl=MAPPED)
    use_dynamic_bsz: bool = key(False, "size micro-batches by tokens (ppo_max_token_len_per_gpu), not samples")
    ppo_max_token_len_per_gpu: int = key(16384, "tokens per forward with use_dynamic_bsz", at_least=1)
    ppo_epochs: int = key(1, "passes over each step's samples", at_least=1)
    use_kl_loss: bool = key(False, "add a KL penalty to the reference policy to the loss")
    kl_loss_coef: float = key(0.001, "the KL loss's weight", at_least=0)
    kl_loss_type: str = key("low_var_kl", "the KL loss's estimator, by its registered name")
    entropy_coeff: float = key(0.0, "the entropy bonus's weight")
    grad_clip: float = key(1.0, "the gradients' global norm is clipped to this", verl=NOT_SENT)
    # trained weights and AdamW state stay float32 (omni_training.model_loading.precision)
    dtype: str = key(
        "auto", "the actor's compute dtype, auto: bfloat16 on a GPU and float32 on the CPU",
        choices=("auto", "float32", "bfloat16"), engines="local",
        other_engine="holds the actor in actor_rollout_ref.actor.fsdp_config.model_dtype and computes under FSDP's "
                     "mixed precision (honours auto)",
        honoured=("auto",), verl=NOT_SENT)
    old_log_prob: str = key(
        "auto", "auto: an on-policy step (one epoch, one mini-batch, no KL reward, no teacher) takes its old "
        "log-probs from the update's own forward, detached: one actor pass fewer, the same loss and gradients; "
        "recompute: always a pass of their own first",
        choices=("auto", "recompute"), engines="local",
        other_engine="computes the old log-probs in a pass of their own, or takes the rollout's with "
                     "algorithm.rollout_correction.bypass_mode=true (honours recompute)",
        honoured=("recompute",), verl=NOT_SENT)
    talker_drift_coef: float = key(
        0.0, "with trainer.talker_drift: this x talker/drift_kl (on the probes, differentiable in the thinker) is "
        "added to every update's loss, to keep the talker's behaviour", engines="local",
        other_engine="measures no talker drift (honours 0)",
        honoured=(0.0,), verl=NOT_SENT)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer_type: str | None = key(None, "verl-omni's mirror of algorithm.trainer_type", verl=NOT_SENT)
    omni_loss: OmniLossConfig = field(default_factory=OmniLossConfig)


@dataclass
class AgentConfig:
    default_agent_loop: str = key("single_turn_agent", "the agent loop each prompt is sampled with", verl=MAPPED)
    num_workers: int | None = key(
        None, "verl's agent-loop worker processes; null: verl's 8", engines="verl",
        other_engine="runs the agent loop in its one process")


@dataclass
class VllmOmniKwargs:
    """verl-omni's ``rollout.engine_kwargs.vllm_omni.*``; each folds into our key of the same
    meaning (``pipeline_name`` -> ``rollout.pipeline_name``, ``pipeline_mode`` ->
    ``rollout.pipeline_mode``, ``max_num_seqs`` -> ``rollout.max_num_seqs``); ``output_mode``
    must be ``ar`` (text out)."""

    pipeline_name: str | None = key(
        None, "verl-omni's spelling of actor_rollout_ref.rollout.pipeline_name (folded into it)", verl=NOT_SENT)
    pipeline_mode: str | None = key(
        None, "verl-omni's spelling of actor_rollout_ref.rollout.pipeline_mode (folded into it)", verl=NOT_SENT)
    output_mode: str | None = key(
        None, "verl-omni: the server's output mode, ar for autoregressive tokens", engines="verl",
        other_engine="samples token by token (honours ar, the one mode the loader accepts)",
        honoured=any_value, verl=MAPPED)
    max_num_seqs: int | None = key(
        None, "vLLM-Omni's concurrent sequences", engines="verl",
        other_engine="generates a step's samples with the model's generate",
        verl=NOT_SENT)
    stage_configs_path: str | None = key(
        None, "verl-omni's hand-written deploy file; refused (ours is generated from the pipeline)", verl=NOT_SENT)


@dataclass
class EngineKwargsConfig:
    vllm_omni: VllmOmniKwargs = field(default_factory=VllmOmniKwargs)


@dataclass
class ValKwargsConfig:
    """verl's ``rollout.val_kwargs``: how validation samples (default greedy, one response)."""

    n: int = key(1, "responses per validation prompt", at_least=1)
    do_sample: bool = key(False, "sample validation responses; false: greedy")
    temperature: float = key(0.0, "validation sampling temperature", at_least=0, note=" (0: greedy)")
    top_p: float = key(1.0, "validation nucleus sampling mass", above=0, at_most=1)
    top_k: int = key(-1, "validation top-k sampling", at_least=1, allowed=(-1,), note=" (-1: off)")


@dataclass
class CheckpointEngineConfig:
    """verl's ``actor_rollout_ref.rollout.checkpoint_engine``: how the actor's weights reach
    rollout replicas on ranks of their own (verl engine, ``async_training.max_staleness >= 1``).
    ``backend`` None: ``nccl`` on GPUs, ``omni_gloo`` on the CPU; a colocated (synchronous)
    run always syncs in place (verl's ``naive``)."""

    backend: str | None = None
    update_weights_bucket_megabytes: int = 2048


@dataclass
class RolloutConfig:
    n: int = key(8, "samples per prompt (the GRPO group)", at_least=1)
    temperature: float = key(1.0, "sampling temperature", at_least=0, note=" (0: greedy)")
    top_p: float = key(1.0, "nucleus sampling mass", above=0, at_most=1)
    top_k: int = key(-1, "top-k sampling", at_least=1, allowed=(-1,), note=" (-1: off)")
    # None is filled in by load_config from the checkpoint's config.json and its adapter.
    pipeline_name: str | None = key(
        None, "the rollout pipeline; null: the one the model's training adapter declares", verl=NOT_SENT)
    pipeline_mode: str = key(
        "thinker_only", "which stages the rollout runs and which one is the policy (thinker_only, talker, ...)",
        verl=NOT_SENT)
    speaker: str | None = key(
        None, "stage=talker: the voice, one of the checkpoint's speakers; null: its first", verl=NOT_SENT)
    agent: AgentConfig = field(default_factory=AgentConfig)
    val_kwargs: ValKwargsConfig = field(default_factory=ValKwargsConfig)
    engine_kwargs: EngineKwargsConfig = field(default_factory=EngineKwargsConfig)
    # verl engine (vLLM-Omni rollout); verl's names. The schema's values suit one GPU and a
    # small model; omni_trainer.yaml holds the real model's (the pre-flight refuses a tensor
    # parallel size whose weights per GPU leave no KV cache in gpu_memory_utilization).
    # On trainer.device=cpu the rollout is omni_local unless this key names vllm_omni (the real
    # engine on vLLM's CPU build, the cpu-rollout extra): a named rollout is never swapped.
    name: str = key(
        "vllm_omni", "verl's rollout server, vllm_omni", choices=("vllm_omni", "omni_local"), engines="verl",
        other_engine="samples with the model's generate")
    mode: str = key(
        "async", "verl's rollout mode, async servers", choices=("async",), engines="verl",
        other_engine="samples with the model's generate")
    dtype: str | None = key(
        None, "the rollout engine's dtype; null: verl's bfloat16 on GPUs, the actor's on the CPU (so log-probs can "
        "agree)", engines="verl",
        other_engine="samples with the training model itself, in the actor's dtype")
    tensor_model_parallel_size: int = key(
        1, "GPUs per vLLM-Omni rollout replica", engines="verl",
        other_engine="trains and samples in one process on one device (honours 1)",
        honoured=(1,))
    gpu_memory_utilization: float = key(
        0.5, "vLLM-Omni's share of each GPU for weights and KV cache", engines="verl",
        other_engine="reserves no share: generate allocates as it goes")
    max_num_seqs: int = key(
        256, "vLLM-Omni's concurrent sequences", engines="verl",
        other_engine="generates a step's samples with the model's generate")
    max_num_batched_tokens: int = key(
        8192, "vLLM-Omni's tokens per scheduler step", engines="verl",
        other_engine="generates a step's samples with the model's generate")
    cudagraph_capture_sizes: list[int] | None = key(
        None, "batch sizes vLLM-Omni captures CUDA graphs for", engines="verl", other_engine="captures no CUDA graphs")
    enforce_eager: bool = key(
        False, "vLLM-Omni without CUDA graphs", engines="verl", other_engine="runs eagerly (honours true)",
        honoured=(True,))
    free_cache_engine: bool = key(
        True, "vLLM-Omni sleeps while the actor trains", engines="verl", other_engine="has no separate rollout engine")
    enable_prefix_caching: bool = key(
        False, "vLLM's prefix cache; off, as vLLM-Omni's deploy files set every Qwen-Omni stage, so log-probs do not "
        "depend on cache state (verl's default is on)", engines="verl",
        other_engine="has no prefix cache (honours false)", honoured=(False,))
    load_format: str | None = key(
        None, "how vLLM-Omni loads its first weights; null: verl's dummy (random, then the actor's synced in)",
        engines="verl",
        other_engine="samples from the training model itself")
    prompt_length: int | None = key(
        None, "the rollout's prompt budget: a longer multimodal prompt fails, a text one is left-truncated; null: "
        "data.max_prompt_length (verl's default; more leaves room for media expansion)",
        engines="verl",
        other_engine="drops prompts over data.max_prompt_length before sampling (honours a budget of at least that)",
        honoured=lambda value, config: value >= config.data.max_prompt_length)
    log_prob_micro_batch_size_per_gpu: int | None = log_prob_sizing("old", "ppo_micro_batch_size_per_gpu", verl=MAPPED)
    log_prob_use_dynamic_bsz: bool | None = log_prob_sizing("old", "use_dynamic_bsz")
    log_prob_max_token_len_per_gpu: int | None = log_prob_sizing("old", "ppo_max_token_len_per_gpu")
    enable_rollout_routing_replay: bool = key(
        False, "records each token's experts in the rollout for the actor to replay (MoE models)", engines="verl",
        other_engine="samples with the actor's own module, so its routing is the actor's: nothing to replay (honours "
                     "false)",
        honoured=(False,), verl=MAPPED)
    checkpoint_engine: CheckpointEngineConfig = section(
        CheckpointEngineConfig, "how the actor's weights reach rollout replicas on ranks of their own", engines="verl",
        other_engine="hands its sampling thread the trainable weights in memory")

    def pipeline(self) -> str:
        """``pipeline_name``, which the pre-flight guarantees is set.

        Raises:
            ConfigError: it is unset and the model named none.
        """
        if self.pipeline_name is None:
            raise ConfigError(
                "actor_rollout_ref.rollout.pipeline_name is unset and the model's adapter names no "
                "rollout pipeline; set it (uv run trainer --list-models lists the pipelines)"
            )
        return self.pipeline_name


@dataclass
class ActorRolloutRefConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    ref: RefConfig = field(default_factory=RefConfig)


@dataclass
class KLControlConfig:
    kl_coef: float = key(0.001, "the reward's KL penalty weight", at_least=0)


@dataclass
class RolloutCorrectionConfig:
    """verl's ``algorithm.rollout_correction``, its names, meanings and defaults (verl 0.9.1's
    ``RolloutCorrectionConfig``): importance weights between the rollout's and the actor's
    log-probs (``rollout_is``: ``token`` or ``sequence``; ``rollout_is_threshold``: an upper
    bound, or ``"lower_upper"``), rejection of tokens or sequences (``rollout_rs``, its
    thresholds), and ``bypass_mode`` (train on the rollout's log-probs as the old ones). The
    verl engine hands it to verl; the local engine applies omni-training's implementation
    (:mod:`omni_training.rollout_correction`)."""

    rollout_is: str | None = key(
        None,
        "importance weights between the rollout and the actor: token or sequence; null: none (the off-policy metrics "
        "are still measured)")
    rollout_is_threshold: Any = key(
        2.0, "the weights' upper bound (truncated), or \"lower_upper\" bounds (a float, or a string)")
    rollout_is_batch_normalize: bool = key(False, "normalise the weights to mean 1 over the batch")
    rollout_rs: str | None = key(
        None,
        "rejection of tokens or sequences off the rollout: comma-separated modes (token_k1, seq_mean_k3, ...); null: "
        "none")
    rollout_rs_threshold: Any = key(None, "each rejection mode's threshold (a float or \"lower_upper\")")
    bypass_mode: bool = key(False, "train on the rollout's log-probs as the old ones (no recompute)")
    loss_type: str = key("ppo_clip", "the loss in bypass mode: ppo_clip (the configured policy loss) or reinforce")


@dataclass
class AsyncTrainingConfig:
    """Asynchronous rollout (text RL): the coming steps are sampled while the actor updates;
    ``max_staleness`` is how many policy updates a sample may lag the actor that trains on it
    (0: synchronous). The local engine samples in a thread with a copy of the policy. The verl
    engine runs verl's one-step-off trainer at ``max_staleness=1`` and its fully-async trainer
    above it, the rollout on a pool of its own (``rollout.nnodes`` x ``rollout.n_gpus_per_node``),
    training on the rollout's own log-probs (``algorithm.rollout_correction.bypass_mode=true``,
    as verl's recipes).

    The other keys are verl's fully-async trainer's, with its meanings: a sample is one prompt's
    ``n`` responses, streamed; a step trains on ``data.train_batch_size`` of them
    (``ppo_mini_batch_size`` x ``require_batches``); the replicas take the actor's weights every
    ``trigger_parameter_sync_step`` steps; the rollout runs at most ``staleness_threshold`` x a
    sync's samples ahead. Unset, ``trigger_parameter_sync_step`` is 1 and ``staleness_threshold``
    ``max_staleness - 1``; the pre-flight refuses values whose worst case exceeds
    ``max_staleness`` (:mod:`omni_trainer.engines.verl.async_training`). ``partial_rollout``
    (verl's default true; ours false) lets a sync abort requests and resume them with the new
    weights: such a sample's first tokens can be older than the bound."""

    max_staleness: int = key(
        0, "policy updates a sample may lag the actor that trains on it; 0: synchronous", verl=NOT_SENT)
    staleness_threshold: float | None = key(
        None, "how far verl's fully-async rollout runs ahead", engines="verl",
        other_engine="samples at most max_staleness steps ahead",
        verl=MAPPED)
    trigger_parameter_sync_step: int | None = key(
        None, "steps between verl's weight syncs", engines="verl",
        other_engine="hands its sampling thread every update (honours 1)",
        honoured=(1,), verl=MAPPED)
    require_batches: int | None = key(
        None, "mini-batches a fully-async step collects", engines="verl",
        other_engine="trains on data.train_batch_size prompts a step",
        verl=MAPPED)
    partial_rollout: bool = key(
        False, "verl aborts requests at a weight sync and resumes them", engines="verl",
        other_engine="finishes every sample with the weights it started with (honours false)",
        honoured=(False,), verl=MAPPED)
    concurrent_samples_per_replica: int = key(
        16, "requests in flight per verl rollout replica", engines="verl",
        other_engine="samples a step's prompts in one batch",
        verl=MAPPED)
    use_trainer_do_validate: bool = key(
        False, "validation on the trainer's GPUs", engines="verl",
        other_engine="validates in its one process (honours false)",
        honoured=(False,), verl=MAPPED)
    use_dynamic_resource_scheduling: bool = key(
        False, "trainer GPUs lent to the rollout", engines="verl", other_engine="shares its one device (honours false)",
        honoured=(False,), verl=MAPPED)


@dataclass
class RolloutPoolConfig:
    """verl's top-level ``rollout`` of its one-step-off and fully-async trainers: the rollout's
    own GPU pool (nodes x GPUs), apart from ``trainer.nnodes`` x ``trainer.n_gpus_per_node``; Ray
    must offer both. ``total_rollout_steps`` caps the prompts the fully-async rollout draws (verl's
    key; unset, ``trainer.total_training_steps`` sets it). Read with
    ``async_training.max_staleness >= 1`` on the verl engine only."""

    nnodes: int = key(
        1, "nodes of the asynchronous rollout's own GPU pool", engines="verl",
        other_engine="samples asynchronously in a thread of its one process",
        verl=MAPPED)
    n_gpus_per_node: int = key(
        8, "GPUs per node of the asynchronous rollout's pool", engines="verl",
        other_engine="samples asynchronously in a thread of its one process",
        verl=MAPPED)
    total_rollout_steps: int | None = key(
        None, "prompts verl's fully-async rollout draws in all", engines="verl",
        other_engine="runs trainer.total_training_steps steps of data.train_batch_size prompts",
        verl=MAPPED)


@dataclass
class AlgorithmConfig:
    adv_estimator: str = key("grpo", "the advantage estimator, by its registered name")
    norm_adv_by_std_in_grpo: bool = key(True, "divide GRPO's group advantages by the group's standard deviation")
    gamma: float = key(1.0, "the discount over a response's tokens", at_least=0, at_most=1)
    use_kl_in_reward: bool = key(False, "subtract a KL penalty to the reference policy from the reward")
    kl_penalty: str = key("kl", "the reward's KL estimator, by its registered name")
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    sample_source: str = key(
        "online", "online: RL on the rollout's samples; offline (with direct_preference and paired_preference, as "
        "verl-omni): preference pairs from the data, data.train_batch_size counting pairs", verl=NOT_SENT)
    trainer_type: str = key("policy_gradient", "policy_gradient (RL) or direct_preference (offline DPO)", verl=NOT_SENT)
    paired_preference: bool = key(False, "offline runs: train on chosen/rejected pairs", verl=NOT_SENT)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)


@dataclass
class CustomRewardFunctionConfig:
    """verl's ``reward.custom_reward_function``: ``name`` in the Python file ``path`` scores
    every response as ``name(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)``."""

    path: str | None = key(None, "a Python file with the user's reward function", verl=MAPPED)
    name: str = key("compute_score", "the reward function's name in reward.custom_reward_function.path", verl=MAPPED)
    reward_kwargs: dict[str, Any] = key({}, "keyword arguments passed to the reward function", verl=MAPPED)


@dataclass
class RewardManagerSection:
    """verl's ``reward.reward_manager``: the class that calls the reward function per sample."""

    source: str | None = key(
        None, "where verl finds its reward manager class; null: verl's register", engines="verl",
        other_engine="scores each response with its data source's scorer, as verl's registered naive manager does "
                     "(honours register)",
        honoured=('register',))
    name: str | None = key(
        None, "verl's reward manager class; null: verl's naive", engines="verl",
        other_engine="scores each response with its data source's scorer, as verl's naive manager does (honours "
                     "naive)",
        honoured=('naive',))


@dataclass
class JudgeRolloutConfig:
    """verl's ``reward.reward_model.rollout``: how the judge is served and answers. verl starts
    ``name``'s servers (vLLM on GPUs); the local engine answers with transformers' ``generate``
    in this process (``omni_rollout.chat_server``) and reads the length and sampling keys. A
    request's own ``max_tokens``, ``temperature`` and ``top_p`` win over these defaults."""

    name: str | None = key(
        None, "verl's server for the judge (vllm)", engines="verl",
        other_engine="answers with transformers' generate in this process")
    dtype: str | None = key(
        None, "the judge's dtype; null: verl's bfloat16 (the local engine: bfloat16 on a GPU, float32 on the CPU)",
        choices=("bfloat16", "float16", "float32"))
    tensor_model_parallel_size: int | None = key(
        None, "GPUs per judge replica", at_least=1, engines="verl",
        other_engine="serves the judge on the policy's device (honours 1)", honoured=(1,))
    gpu_memory_utilization: float | None = key(
        None, "the judge server's share of each GPU", above=0, at_most=1, engines="verl",
        other_engine="reserves no share: generate allocates as it goes", honoured=any_value)
    enforce_eager: bool | None = key(
        None, "the judge's vLLM without CUDA graphs", engines="verl", other_engine="runs eagerly",
        honoured=any_value)
    free_cache_engine: bool | None = key(
        None, "the judge's vLLM sleeps between scorings", engines="verl",
        other_engine="keeps the judge in memory", honoured=any_value)
    max_model_len: int | None = key(
        None, "the judge's context (prompt + response)", at_least=1, engines="verl",
        other_engine="bounds the prompt by prompt_length and the answer by response_length", honoured=any_value)
    limit_images: int | None = key(
        None, "images per judge prompt", at_least=0, engines="verl", other_engine="takes every image a request holds",
        honoured=any_value)
    max_num_seqs: int | None = key(
        None, "requests the judge answers together; null: verl's 1024 (the local engine: 16)", at_least=1)
    prompt_length: int | None = key(
        None, "the longest judge prompt in tokens (a longer one is refused, counted as a failed sample); "
        "null: verl's 2048", at_least=1)
    response_length: int | None = key(
        None, "the most tokens a judge answer may take; null: verl's 2048", at_least=1)
    temperature: float | None = key(
        None, "the judge's temperature where a request gives none; null: verl's 1.0", at_least=0)
    top_p: float | None = key(None, "the judge's top-p where a request gives none; null: verl's 1.0", above=0, at_most=1)
    top_k: int | None = key(None, "the judge's top-k; null: verl's -1 (off)", at_least=1, allowed=(-1,))
    do_sample: bool | None = key(None, "false: the judge answers greedily; null: verl's true")


@dataclass
class JudgeModelConfig:
    """verl's ``reward.reward_model``: a judge model served for the reward function, which gets
    its address as ``reward_router_address`` and its tokenizer as ``reward_model_tokenizer``
    (``omni_rewards.judge`` asks it). Needs ``reward.custom_reward_function``."""

    enable: bool = key(False, "serve a judge model for the reward function (verl's generative reward model)",
                       verl=MAPPED)
    model_path: str | None = key(None, "the judge checkpoint", verl=MAPPED)
    enable_resource_pool: bool | None = key(
        None, "the judge on a GPU pool of its own (the verl engine needs true: verl's trainer scores a judge on the "
        "training GPUs without the rows' data)", engines="verl",
        other_engine="serves the judge in this process on the policy's device (honours false)", honoured=(False,))
    n_gpus_per_node: int | None = key(
        None, "GPUs per node of the judge's own pool", at_least=1, engines="verl",
        other_engine="serves the judge in this process", honoured=any_value)
    nnodes: int | None = key(
        None, "nodes of the judge's own pool", at_least=0, engines="verl",
        other_engine="serves the judge in this process", honoured=any_value)
    rollout: JudgeRolloutConfig = field(default_factory=JudgeRolloutConfig)


@dataclass
class RewardConfig:
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    reward_manager: RewardManagerSection = field(default_factory=RewardManagerSection)
    reward_model: JudgeModelConfig = field(default_factory=JudgeModelConfig)
    num_workers: int | None = key(
        None, "scorer processes; null: one per CPU", at_least=1, note=", or null (one per CPU)", verl=MAPPED)
    timeout_s: float = key(30.0, "seconds a scorer may take per sample", above=0, verl=MAPPED)
    on_unknown_data_source: str = key(
        "raise", "a row whose data_source no scorer knows: raise, or skip it", choices=("raise", "skip"), verl=MAPPED)
    max_error_rate: float = key(
        0.5, "stop when a step's scorer fails (error or timeout) on more than this share of its samples, which would "
        "score 0 and be trained on; 1.0: never (omni-rl's key)", verl=NOT_SENT)
    audio_rewards: list[dict[str, Any]] = key(
        [], "stage=talker: the speech rewards, summed with weights, each also a metric, e.g. [{name: duration, "
        "weight: 1.0}, {name: http, label: asr, url: ..., weight: 1.0}] (omni_rewards.audio)", verl=NOT_SENT)


@dataclass
class TrainerConfig:
    engine: str = key("local", "the engine that runs the job", choices=("local", "verl"), verl=NOT_SENT)
    total_epochs: int = key(
        1, "passes over the train rows; with trainer.total_training_steps set, the steps govern and the passes "
        "repeat past total_epochs (verl stops at whichever ends first: verl gets enough epochs for the steps)",
        at_least=1, verl=MAPPED)
    total_training_steps: int | None = key(
        None, "steps of the run; null: total_epochs x steps per epoch", at_least=1,
        note=", or null (total_epochs x steps per epoch)")
    save_freq: int = key(
        20, "steps between checkpoints; -1 (verl's default) or 0: only at the end", at_least=-1, verl=MAPPED)
    test_freq: int = key(-1, "steps between validations; -1 or 0: none", at_least=-1, verl=MAPPED)
    val_before_train: bool = key(True, "validate before the first step (as verl does)", verl=MAPPED)
    log_val_generations: int = key(
        0, "validation samples (prompt, response, score; verl's fixed-seed choice) logged per validation, to "
        "<run_dir>/val_generations/step_<N>.jsonl (local engine) and the loggers as val/generations", at_least=0)
    talker_drift: bool = key(
        False, "thinker runs of a checkpoint that speaks: report talker/drift_kl with each validation (a frozen copy "
        "speaks fixed probes; twice the weights' memory)", engines="local",
        other_engine="measures no talker drift (honours false)",
        honoured=(False,), verl=NOT_SENT)
    talker_drift_rewards: list[dict[str, Any]] = key(
        [], "with trainer.talker_drift: audio rewards (reward.audio_rewards' form) of the drift probes' speech, "
        "reported as talker/probe/<metric>, never paid",
        engines="local",
        other_engine="measures no talker drift (honours [])", honoured=([],), verl=NOT_SENT)
    max_checkpoints_to_keep: int = key(2, "checkpoints kept (verl's max_actor_ckpt_to_keep)", at_least=1, verl=MAPPED)
    resume_mode: str = key(
        "auto", "where a run resumes from: auto, the newest checkpoint in the run directory; disable, nowhere (the "
        "local engine moves an earlier run aside); resume_path, trainer.resume_from_path",
        choices=("auto", "disable", "resume_path"))
    resume_from_path: str | None = key(
        None, "resume_mode=resume_path: the checkpoint to resume from (local engine: a run's checkpoints/step_<N>; "
        "verl: a global_step_<N> folder)", verl=MAPPED)
    resume_anyway: bool = key(
        False, "resume although the settings or the data differ from the run's saved config.yaml (the differences "
        "are listed; the earlier config is kept as config.before_step_<N>.yaml)", verl=NOT_SENT)
    default_local_dir: str = key(
        "runs/${trainer.experiment_name}", "the run directory: the config, checkpoints and metrics")
    project_name: str = key("omni-rl", "the loggers' project")
    experiment_name: str | None = key(None, "the run's name; null: derived from the model and the train files")
    logger: list[str] = key(["console"], "where metrics go: console, tensorboard, wandb", verl=MAPPED)
    seed: int = key(
        0, "seeds torch and Python's random: LoRA's initial weights, sampling", engines="local",
        other_engine="seeds its workers with verl's own seeds (42); data.seed shuffles the data on both engines",
        verl=NOT_SENT)
    device: str = key(
        "auto", "the device the run trains on; auto: cuda when visible, else cpu (verl: cuda, or cpu)",
        choices=("auto", "cpu", "cuda", "npu"), verl=MAPPED)
    nnodes: int = key(
        1, "Ray nodes of the run", engines="verl",
        other_engine="trains and samples in one process on one device (honours 1)",
        honoured=(1,))
    n_gpus_per_node: int = key(
        8, "GPUs verl uses on each node", engines="verl",
        other_engine="trains and samples in one process on one device (honours 1)",
        honoured=(1,))
    balance_batch: bool | None = key(
        None, "reorder each batch so verl's data-parallel ranks get equal token counts; null: verl's true",
        engines="verl",
        other_engine="has one rank (honours false)",
        honoured=(False,))
    critic_warmup: int | None = key(
        None, "critic-only steps before the actor trains", engines="verl", other_engine="has no critic (honours 0)",
        honoured=(0,))


@dataclass
class RuntimeEnvConfig:
    env_vars: dict[str, str] = field(default_factory=dict)  # extra env vars for every Ray worker


@dataclass
class RayInitConfig:
    address: str | None = None  # None: start a local Ray; "auto": attach to `ray start --head`
    num_cpus: int | None = None
    num_gpus: int | None = None  # None: Ray counts them (more lets pools share a GPU, e.g. a smoke)
    runtime_env: RuntimeEnvConfig = field(default_factory=RuntimeEnvConfig)


@dataclass
class RayKwargsConfig:
    """verl engine: arguments of ``ray.init`` (verl's ``ray_kwargs``)."""

    ray_init: RayInitConfig = field(default_factory=RayInitConfig)
    timeline_json_file: str | None = None


@dataclass
class DistillationLossConfig:
    loss_mode: str = key(
        "kl", "the divergence: kl|k1 (reverse KL on sampled tokens), k3|low_var_kl, forward_kl_topk, ...",
        verl=NOT_SENT)
    topk: int = key(32, "forward_kl_topk: the teacher's top-k tokens compared", verl=NOT_SENT)
    use_task_rewards: bool = key(
        True, "train on the task's rewards too; false: pure distillation (rewards are still reported)", verl=NOT_SENT)
    distillation_loss_coef: float = key(1.0, "the distillation loss's weight next to the task loss", verl=NOT_SENT)
    loss_max_clamp: float | None = key(
        None, "an upper bound of the per-token distillation loss; null: none", verl=NOT_SENT)
    log_prob_min_clamp: float | None = key(None, "a lower bound of the log-probs compared; null: none", verl=NOT_SENT)
    use_policy_gradient: bool = key(True, "-divergence as a per-token advantage; false: a direct loss", verl=NOT_SENT)
    clip_ratio: float = key(0.2, "the distillation policy gradient's clip range", verl=NOT_SENT)
    clip_ratio_low: float | None = key(None, "its clip range below 1; null: clip_ratio", verl=NOT_SENT)
    clip_ratio_high: float | None = key(None, "its clip range above 1; null: clip_ratio", verl=NOT_SENT)


@dataclass
class TeacherInferenceConfig:
    """verl engine: the teacher's vLLM-Omni server (verl's ``teacher_model.inference``). Each
    replica takes ``tensor_model_parallel_size`` GPUs of the teacher pool; ``max_model_len``
    must hold prompt + response + 1 (None: the model's maximum)."""

    tensor_model_parallel_size: int = 1
    gpu_memory_utilization: float = 0.5
    max_model_len: int | None = None
    name: str | None = None
    """verl's name of the teacher's server; null: verl's default, the student's rollout (vllm_omni, or
    omni_local on the CPU). Honoured when it names that rollout, and not sent."""


@dataclass
class TeacherModelConfig:
    model_path: str | None = key(None, "the teacher checkpoint (it must share the student's tokenizer)", verl=MAPPED)
    log_prob_micro_batch_size_per_gpu: int = key(
        16, "samples per forward of the in-process teacher", at_least=1, engines="local",
        other_engine="serves the teacher from rollout servers sized by "
                     "distillation.teacher_models.teacher_model.inference.*",
        verl=NOT_SENT)
    param_offload: bool = key(
        False, "keeps the in-process teacher's weights on the CPU between uses", engines="local",
        other_engine="serves the teacher from rollout servers on GPUs of their own (honours false)",
        honoured=(False,), verl=NOT_SENT)
    inference: TeacherInferenceConfig = section(
        TeacherInferenceConfig, "the teacher's vLLM-Omni server", engines="verl",
        other_engine="runs the teacher with transformers in its own process")


@dataclass
class TeacherModelsConfig:
    teacher_model: TeacherModelConfig = field(default_factory=TeacherModelConfig)


@dataclass
class DistillationConfig:
    enabled: bool = key(False, "on-policy distillation from a teacher model", verl=MAPPED)
    n_gpus_per_node: int = key(
        8, "GPUs per node of the teacher's own pool, apart from the trainer's (Ray must offer both)", engines="verl",
        other_engine="runs the teacher in its own process", verl=MAPPED)
    nnodes: int = key(
        1, "nodes of the teacher's GPU pool", engines="verl", other_engine="runs the teacher in its own process",
        verl=MAPPED)
    distillation_loss: DistillationLossConfig = field(default_factory=DistillationLossConfig)
    teacher_models: TeacherModelsConfig = field(default_factory=TeacherModelsConfig)


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    distillation: DistillationConfig = field(default_factory=DistillationConfig)
    ray_kwargs: RayKwargsConfig = section(
        RayKwargsConfig, "arguments of ray.init", engines="verl", other_engine="starts no Ray")
    async_training: AsyncTrainingConfig = field(default_factory=AsyncTrainingConfig)
    rollout: RolloutPoolConfig = field(default_factory=RolloutPoolConfig)
    # Recorded by load_config, never set by an override, left out of the written config: the
    # keys the override groups gave (run script, "$@"), not the packaged defaults or presets.
    # The local engine refuses the verl-engine keys among them it cannot honour.
    given_keys: list[str] = field(default_factory=list)


class ConfigError(ValueError):
    """A configuration problem; the message says what and how to fix it."""

    @property
    def problems(self) -> list[str]:
        """The message's problems, one per item (``Invalid configuration:\n  - a\n  - b``)."""
        lines = str(self).splitlines()
        items = [line.strip()[2:] for line in lines if line.strip().startswith("- ")]
        return items or [str(self)]


RECORDED_KEYS = ("given_keys",)
"""Fields load_config fills in itself; an override may not set them."""


def all_keys(node: Any = None, prefix: str = "") -> list[str]:
    """Every leaf key of the schema, dotted (the recorded fields left out)."""
    node = OmegaConf.structured(Config) if node is None else node
    keys = []
    for key in node:
        if not prefix and key in RECORDED_KEYS:
            continue
        value = node[key] if not OmegaConf.is_missing(node, key) else None
        dotted = f"{prefix}{key}"
        if isinstance(value, DictConfig) and len(value) > 0:
            keys.extend(all_keys(value, dotted + "."))
        else:
            keys.append(dotted)
    return keys


EDIT_FRACTION = 4
"""A mistyped name is close to a known one when at most one edit in this many characters
(at least one edit) turns one into the other: ``temprature`` -> ``temperature`` (1 of 11),
``rollout.nn`` -> ``rollout.n`` (1 of 2); ``learning_rate`` is close to nothing in ``optim``."""


def closest_keys(key: str) -> list[str]:
    """The known keys an unknown ``key`` most likely meant; empty when none is close.

    In order: the same last segment elsewhere (``actor_rollout_ref.actor.param_offload`` ->
    ``actor_rollout_ref.actor.fsdp_config.param_offload``; a bare segment lists every place),
    then a close last segment in the same section (or one it begins: ``use_kl`` ->
    ``use_kl_loss``), then a key whose section and last segment are both close
    (``actor_rollout_ref.rolout.temprature``). Nothing unrelated is offered: a key close to
    none is reported without a suggestion.
    """
    keys = all_keys()
    parent, _, leaf = key.rpartition(".")
    same_leaf = [k for k in keys if k.rpartition(".")[2] == leaf]
    if same_leaf:
        if not parent:
            return same_leaf
        return [min(same_leaf, key=lambda k: _edit_distance(key, k))]
    siblings = [k for k in keys if k.rpartition(".")[0] == parent]
    scored = [(_edit_distance(leaf, k.rpartition(".")[2]), k) for k in siblings]
    close = [(d, k) for d, k in scored if _close(leaf, k.rpartition(".")[2], d)]
    if close:
        return [min(close)[1]]
    # A misspelled section too: both the section path and the last segment must be close.
    close = []
    for known in keys:
        known_parent, _, known_leaf = known.rpartition(".")
        leaf_distance, parent_distance = _edit_distance(leaf, known_leaf), _edit_distance(parent, known_parent)
        if _close(leaf, known_leaf, leaf_distance) and _close(parent, known_parent, parent_distance):
            close.append((leaf_distance + parent_distance, known))
    return [min(close)[1]] if close else []


def _close(typed: str, known: str, distance: int) -> bool:
    if len(typed) >= 3 and known.startswith(typed):
        return True
    return distance <= max(1, max(len(typed), len(known)) // EDIT_FRACTION)


def _edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions)."""
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b)))
        previous = current
    return previous[-1]


def unknown_key_message(key: str, origin: str) -> str:
    """``unknown key ...`` with the closest known key(s), or a pointer to the list of keys; a key
    of an engine or feature omni-rl does not have says so and what to use instead
    (:mod:`omni_trainer.foreign_keys`)."""
    foreign = foreign_message(key)
    if foreign:
        return f"{foreign} (in {origin})"
    found = closest_keys(key)
    if not found:
        hint = "no known key is close (`uv run trainer --print-config` prints every key)"
    elif len(found) == 1:
        hint = f"did you mean {found[0]!r}?"
    else:
        hint = "did you mean one of " + ", ".join(repr(k) for k in found) + "?"
    return f"unknown key {key!r} (in {origin}); {hint}"


def packaged_yaml(name: str) -> DictConfig:
    text = resources.files("omni_trainer").joinpath(name).read_text()
    loaded = OmegaConf.create(text)
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{name} must hold a mapping of config sections.")
    return loaded


EMBEDDED_TRIGGERS = ("actor_rollout_ref.model.path", "data.train_files")
FILE_LIST_KEYS = ("data.train_files", "data.val_files")
"""Keys that take a list of paths; a single path (verl's usual ``data.train_files=x.parquet``) is a list of one."""
LIST_KEYS = (*FILE_LIST_KEYS, "trainer.logger")
"""Keys that take a list, where verl also takes one value as a list of one (``trainer.logger=console``)."""
AGENT_LOOP_ALIASES = {"omni_single_turn_agent": "single_turn_agent"}
"""verl-omni's agent-loop names -> ours (under verl, ours runs as ``omni_single_turn_agent``)."""
KEY_ALIASES = {
    "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.pipeline_name": "actor_rollout_ref.rollout.pipeline_name",
    "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.max_num_seqs": "actor_rollout_ref.rollout.max_num_seqs",
    "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.pipeline_mode": "actor_rollout_ref.rollout.pipeline_mode",
    "actor_rollout_ref.actor.freeze_vision_tower": "actor_rollout_ref.model.freeze_vision_tower",
    "actor_rollout_ref.actor.optim.clip_grad": "actor_rollout_ref.actor.grad_clip",
    "data.mm_processor_kwargs.use_audio_in_video": "data.use_audio_in_video",
}
"""verl's and verl-omni's spellings -> the keys of the same meaning here (``engine_kwargs.vllm_omni.*``;
verl's ``actor.freeze_vision_tower`` and ``actor.optim.clip_grad``; verl-omni's processor switch for
soundtracks). Both are passed to verl."""
DATASET_CLASS_KEYS = {"NextQARLHFDataset": {"data.soundtrack_as_audio": True}}
"""verl-omni's dataset classes whose job is a key here (``data.custom_cls.name``): the keys they set."""
OUTPUT_MODES = ("ar",)


def load_config(*override_groups: list[str]) -> Config:
    """Schema <- packaged defaults [<- embedded preset] <- each override group, in order.

    The embedded preset (``embedded.yaml``) applies when no override names a model path or
    train files: that is the tiny built-in run of a bare ``uv run trainer``; with
    ``actor_rollout_ref.model.stage=talker``, ``embedded_talker.yaml`` follows it (the
    built-in speech task); with ``algorithm.sample_source=offline``, ``embedded_preference.yaml``
    (the built-in preference pairs); with ``trainer.engine=verl``, ``embedded_verl.yaml`` (full
    fine-tuning).

    Raises:
        ConfigError: every problem found, each naming the key (and the closest valid key).
    """
    config = OmegaConf.structured(Config)
    problems: list[str] = []
    parsed = [_parse(overrides, problems) for overrides in override_groups]
    layers = [("omni_trainer.yaml", packaged_yaml("omni_trainer.yaml"))]
    given = list(dict.fromkeys(key for layer in parsed for key, _ in _flatten(layer)))
    user_keys = set(given)
    for key in given:
        if key.split(".", 1)[0] in RECORDED_KEYS:
            problems.append(f"{key} is recorded by the loader (the keys your overrides set); it cannot be set")
    if not user_keys & set(EMBEDDED_TRIGGERS):
        layers.append(("embedded.yaml", packaged_yaml("embedded.yaml")))
        stages = [value for layer in parsed for key, value in _flatten(layer) if key == "actor_rollout_ref.model.stage"]
        if stages and stages[-1] == "talker":
            layers.append(("embedded_talker.yaml", packaged_yaml("embedded_talker.yaml")))
        sources = [value for layer in parsed for key, value in _flatten(layer) if key == "algorithm.sample_source"]
        if sources and sources[-1] == "offline":
            layers.append(("embedded_preference.yaml", packaged_yaml("embedded_preference.yaml")))
        engines = [value for layer in parsed for key, value in _flatten(layer) if key == "trainer.engine"]
        engine_layer = f"embedded_{engines[-1]}.yaml" if engines and str(engines[-1]).isidentifier() else None
        if engine_layer and resources.files("omni_trainer").joinpath(engine_layer).is_file():
            layers.append((engine_layer, packaged_yaml(engine_layer)))
    layers.extend(("overrides", layer) for layer in parsed)
    for origin, layer in layers:
        for key, value in _flatten(layer):
            if key in LIST_KEYS and isinstance(value, str):
                value = [value]
            try:
                OmegaConf.update(config, key, value, merge=False)
            except (ConfigKeyError, AttributeError, KeyError):
                problems.append(unknown_key_message(key, origin))
            except ValidationError as exc:
                problems.append(f"{key}: {value!r} is not valid here ({_first_line(exc)})")
    if not problems:
        _fold_verl_aliases(config, user_keys, problems)
    if problems:
        raise ConfigError("Invalid configuration:\n  - " + "\n  - ".join(problems))
    OmegaConf.update(config, "given_keys", given, merge=False)
    if OmegaConf.select(config, "trainer.experiment_name") is None:
        OmegaConf.update(config, "trainer.experiment_name", derived_experiment_name(config))
    try:
        resolved = OmegaConf.to_object(config)
    except InterpolationResolutionError as exc:
        raise ConfigError(f"Invalid configuration:\n  - {exc.full_key}: {_first_line(exc)} (set what the "
                          "interpolation names, e.g. the environment variable of ${oc.env:NAME}, or give the value)"
                          ) from exc
    assert isinstance(resolved, Config)
    non_finite = _non_finite_keys(resolved)
    if non_finite:
        raise ConfigError("Invalid configuration:\n  - " + "\n  - ".join(
            f"{key}={OmegaConf.select(config, key)} is not a finite number (every step's loss or weight would be "
            "NaN or infinite); give a number" for key in non_finite
        ))
    _check_choices(resolved)
    rollout = resolved.actor_rollout_ref.rollout
    if rollout.pipeline_name is None:
        rollout.pipeline_name = model_pipeline(resolved.actor_rollout_ref.model.path, resolved.actor_rollout_ref.model.stage)
    return resolved


def _non_finite_keys(node: Any, prefix: str = "") -> list[str]:
    """The dotted keys of ``node`` (a config dataclass) holding a NaN or infinite float, also
    inside lists and dicts."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        items: Iterable[tuple[str, Any]] = ((f.name, getattr(node, f.name)) for f in dataclasses.fields(node))
    elif isinstance(node, dict):
        items = ((str(k), v) for k, v in node.items())
    elif isinstance(node, list):
        items = ((str(i), v) for i, v in enumerate(node))
    elif isinstance(node, float) and not math.isfinite(node):
        return [prefix.rstrip(".")]
    else:
        return []
    return [key for name, value in items for key in _non_finite_keys(value, f"{prefix}{name}.")]


def model_pipeline(model_path: str | None, stage: str) -> str | None:
    """The rollout pipeline the checkpoint's training adapter declares; ``None`` when the
    checkpoint's config cannot be read or no adapter serves it (the pre-flight says why).
    Reads ``config.json`` only: model packages register their adapters without heavy imports."""
    if model_path is None:
        return None
    from omni_contracts import OmniContractError

    read = checkpoint(model_path)
    try:
        return None if read.config is None else read.adapter(stage).rollout_pipeline
    except OmniContractError:
        return None


def uses_embedded_default(config: Config | DictConfig) -> bool:
    return config.actor_rollout_ref.model.path is None and config.data.train_files is None


GENERIC_SPLIT_NAMES = ("train", "test", "val", "valid", "validation", "dev", "data")


def derived_experiment_name(config: Config | DictConfig) -> str:
    """The run name when ``trainer.experiment_name`` is unset: what is trained, so two runs
    of different models or data never share a run directory.

    ``tiny-default`` for the embedded default; otherwise ``<model>-<data>-<digest>``, e.g.
    ``Qwen3-Omni-30B-A3B-Instruct-gsm8k-train-1f3a9c``, where the digest covers the model and
    the train-file paths (equal names in different places stay apart). The model counts by
    content (:func:`_model_identity`), so a symlink or a copy of it in a folder of the same
    name finds the run; ``<model>`` is the folder name as given.
    """
    if uses_embedded_default(config):
        return "tiny-default"
    model_path = config.actor_rollout_ref.model.path
    files = list(config.data.train_files or [])
    model = Path(model_path).name if model_path else "tiny-qwen3-omni"
    data = _data_name(files) if files else "builtin-task"
    identity = json.dumps([_model_identity(model_path) if model_path else None, [os.path.abspath(f) for f in files]])
    digest = hashlib.sha1(identity.encode()).hexdigest()[:6]
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", f"{model}-{data}-{digest}")


def _model_identity(model_path: str) -> str:
    """The model's content digest (:func:`omni_trainer.model_folder.model_fingerprint`: config
    and weight headers, a few ms for the tiny model, cached per process, and the run directory
    computes it again anyway), or its resolved path when nothing readable with a config.json
    is there (a missing folder; the pre-flight says what is wrong with it)."""
    try:
        fingerprint = model_fingerprint(model_path)
    except OSError:
        fingerprint = None
    return f"content:{fingerprint}" if fingerprint else os.path.realpath(os.path.expanduser(model_path))


def _data_name(files: list[str]) -> str:
    first = Path(files[0])
    stem = first.name.split(".")[0]
    generic = stem.lower() in GENERIC_SPLIT_NAMES or stem.lower().split("-")[0] in GENERIC_SPLIT_NAMES
    name = f"{first.parent.name}-{stem}" if generic and first.parent.name else stem
    return name + (f"+{len(files) - 1}" if len(files) > 1 else "")


def _fold_verl_aliases(config: DictConfig, user_keys: set[str], problems: list[str]) -> None:
    """verl's and verl-omni's spellings -> ours: :data:`KEY_ALIASES` and agent-loop names."""
    for alias, key in KEY_ALIASES.items():
        value = OmegaConf.select(config, alias)
        if value is None:
            continue
        current = OmegaConf.select(config, key)
        if key in user_keys and current != value:
            problems.append(f"{alias}={value!r} contradicts {key}={current!r}; set one of them")
        else:
            OmegaConf.update(config, key, value, merge=False)
    dataset_class = OmegaConf.select(config, "data.custom_cls.name")
    for key, value in DATASET_CLASS_KEYS.get(dataset_class, {}).items():
        if key in user_keys and OmegaConf.select(config, key) != value:
            problems.append(f"data.custom_cls.name={dataset_class} means {key}={value}, which is set otherwise; drop one")
        else:
            OmegaConf.update(config, key, value, merge=False)
    output_mode = OmegaConf.select(config, "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.output_mode")
    if output_mode is not None and output_mode not in OUTPUT_MODES:
        problems.append(
            f"actor_rollout_ref.rollout.engine_kwargs.vllm_omni.output_mode={output_mode!r}; valid: "
            f"{', '.join(OUTPUT_MODES)} (the trained stage outputs tokens; speech output is chosen "
            "by actor_rollout_ref.rollout.pipeline_mode)"
        )
    loop_key = "actor_rollout_ref.rollout.agent.default_agent_loop"
    loop = OmegaConf.select(config, loop_key)
    if loop in AGENT_LOOP_ALIASES:
        OmegaConf.update(config, loop_key, AGENT_LOOP_ALIASES[loop], merge=False)


def _parse(overrides: list[str], problems: list[str]) -> DictConfig:
    parsed = OmegaConf.create()
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.lstrip("+")
        if not sep or not key:
            problems.append(f"{item!r} is not key=value (e.g. trainer.total_epochs=2)")
            continue
        value = _yaml_value(raw) if raw else ""
        OmegaConf.update(parsed, key, value, merge=False, force_add=True)
    return parsed


def _yaml_value(raw: str) -> Any:
    """An override's value as YAML reads it; a Hydra dict (``{a:1,b:{c:x}}``, no space after
    the colons, as verl-omni's scripts write them) as the dict Hydra would give."""
    import yaml

    if raw.startswith("{") and re.search(r"[\w'\"\]}]:[^\s/]", raw):
        raw = re.sub(r"([\w'\"\]}]):(?=[^\s/])", r"\1: ", raw)
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def _flatten(node: DictConfig | dict[Any, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """The dotted leaves of ``node``, interpolations (``${oc.env:X}``, ``${other.key}``) left
    unresolved: they resolve once the whole config is built, as Hydra resolves them."""
    plain = OmegaConf.to_container(node, resolve=False) if isinstance(node, DictConfig) else node
    assert isinstance(plain, dict)
    items: list[tuple[str, Any]] = []
    for key, value in plain.items():
        dotted = f"{prefix}{key!s}"
        if isinstance(value, dict) and len(value) > 0:
            items.extend(_flatten(value, dotted + "."))
        else:
            items.append((dotted, value))
    return items


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0]


def _check_choices(config: Config) -> None:
    problems = choice_problems(config)
    unknown_loggers = [name for name in config.trainer.logger if name not in LOGGERS]
    if unknown_loggers:
        problems.append(f"trainer.logger has {unknown_loggers}; valid: {', '.join(LOGGERS)}")
    teacher = config.distillation.teacher_models.teacher_model
    if config.distillation.enabled and not teacher.model_path:
        problems.append(
            "distillation.enabled=true needs distillation.teacher_models.teacher_model.model_path "
            "(the teacher checkpoint; it must share the student's tokenizer)"
        )
    if problems:
        raise ConfigError("Invalid configuration:\n  - " + "\n  - ".join(problems))


def to_yaml(config: Config) -> str:
    """The resolved config as YAML, without the fields load_config records (:data:`RECORDED_KEYS`)."""
    node = OmegaConf.to_container(OmegaConf.structured(config))
    assert isinstance(node, dict)
    for key in RECORDED_KEYS:
        node.pop(key, None)
    return OmegaConf.to_yaml(node)
