"""verl-engine keys on the local engine: each one honoured, or refused by name with the reason.

A verl run script carries over (README): every key verl-omni's Qwen3-Omni launchers pass is
in the schema and reaches verl with verl's meaning (``engines.verl.translate``). Many of them
size or place verl's workers (FSDP, vLLM-Omni, Ray) and have no counterpart in the local
engine's one process. :data:`VERL_KEYS` says, per key, what verl does with it and what the
local engine does instead, and which values describe what the local engine already does
(``tensor_model_parallel_size=1``, ``param_offload=false``): those are honoured. A key the
overrides gave (``Config.given_keys``) with any other value is refused by
:func:`local_refusals`, one line per key; nothing is dropped in silence. Values from the
packaged defaults are not the user's and are never refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omni_trainer.config import Config
from omni_trainer.keys import engine_refusals, shown, value_at

Honoured = Callable[[Any, Config], bool]


def _never(value: Any, config: Config) -> bool:
    return False


def _always(value: Any, config: Config) -> bool:
    return True


def _equals(*accepted: Any) -> Honoured:
    return lambda value, config: any(value == item and type(value) is type(item) for item in accepted)


def _actor(attribute: str) -> Honoured:
    """Honoured when equal to the actor's own setting: the local engine sizes every forward
    (old and reference log-probs too) as the update's micro-batches."""
    return lambda value, config: value == getattr(config.actor_rollout_ref.actor, attribute)


@dataclass(frozen=True)
class VerlKey:
    """A verl-engine key: ``verl`` is what verl does with it, ``local`` what the local engine
    does instead (ending with the values it honours, if any). A key ending in ``.*`` covers
    every key below it."""

    key: str
    verl: str
    local: str
    honoured: Honoured = _never

    def covers(self, given: str) -> bool:
        if self.key.endswith(".*"):
            return given.startswith(self.key[:-1])
        return given == self.key or given.startswith(self.key + ".")  # a dict value's own keys


ONE_PROCESS = "trains and samples in one process on one device"
VERL_KEYS: tuple[VerlKey, ...] = (
    # -- placement and parallelism
    VerlKey("trainer.nnodes", "Ray nodes of the run", f"{ONE_PROCESS} (honours 1)", _equals(1)),
    VerlKey("trainer.n_gpus_per_node", "GPUs verl uses on each node", f"{ONE_PROCESS} (honours 1)", _equals(1)),
    VerlKey("ray_kwargs.*", "arguments of ray.init", "starts no Ray"),
    VerlKey("actor_rollout_ref.actor.strategy", "the FSDP version that shards the actor, fsdp or fsdp2",
            "trains one unsharded model"),
    VerlKey("actor_rollout_ref.ref.strategy", "the FSDP version of the reference model", "has no FSDP"),
    VerlKey("actor_rollout_ref.actor.fsdp_config.use_orig_params", "FSDP1's original-parameter switch", "has no FSDP"),
    VerlKey("actor_rollout_ref.actor.fsdp_config.param_offload",
            "the FSDP actor's parameters and gradients wait on the CPU while it is idle",
            "keeps its actor on its one device (honours false)", _equals(False)),
    VerlKey("actor_rollout_ref.actor.fsdp_config.optimizer_offload",
            "the optimizer state waits on the CPU outside the optimizer step",
            "keeps its actor on its one device, optimizer state included (honours false)", _equals(False)),
    VerlKey("actor_rollout_ref.ref.fsdp_config.param_offload", "the reference model's parameters wait on the CPU",
            "keeps the reference on its one device (honours false)", _equals(False)),
    VerlKey("actor_rollout_ref.actor.fsdp_config.model_dtype", "the dtype FSDP holds the actor's parameters in",
            "sets precision with actor_rollout_ref.actor.dtype"),
    VerlKey("actor_rollout_ref.ref.fsdp_config.model_dtype", "the dtype FSDP holds the reference's parameters in",
            "sets precision with actor_rollout_ref.actor.dtype"),
    VerlKey("actor_rollout_ref.actor.fsdp_config.use_torch_compile", "torch.compile of the FSDP engine's entropy kernel",
            "runs eagerly (honours false)", _equals(False)),
    VerlKey("actor_rollout_ref.actor.entropy_from_logits_with_chunking",
            "entropy over vocabulary chunks, to save memory", "computes entropy in one piece (honours false)",
            _equals(False)),
    VerlKey("actor_rollout_ref.actor.entropy_from_logits_chunk_size", "the chunk size of chunked entropy",
            "does not chunk entropy"),
    # -- the model
    VerlKey("actor_rollout_ref.model.use_remove_padding", "packed, padding-free forward, which needs flash-attn 2",
            "pads its micro-batches (honours false)", _equals(False)),
    VerlKey("actor_rollout_ref.model.external_lib", "a module verl imports in every worker before building the model",
            "finds model code through the omni_rl.models entry points; install the package instead"),
    VerlKey("actor_rollout_ref.model.override_config", "overrides of the checkpoint's HF config at load",
            "loads the checkpoint's config as it is, with transformers' sdpa attention "
            "(honours attn_implementation=sdpa)", lambda value, config: dict(value) in ({}, {"attn_implementation": "sdpa"})),
    VerlKey("actor_rollout_ref.model.lora_dtype", "verl-omni: the dtype the LoRA parameters are cast to once built",
            "keeps LoRA parameters in float32 (honours float32)", _equals("float32", "fp32")),
    VerlKey("actor_rollout_ref.model.lora.merge",
            "merge the adapter into the base weights before each sync to the rollout",
            "samples from the training model with its adapter applied, which either setting gives verl's rollout",
            _always),
    # -- the rollout
    VerlKey("actor_rollout_ref.rollout.name", "verl's rollout server, vllm_omni", "samples with the model's generate"),
    VerlKey("actor_rollout_ref.rollout.mode", "verl's rollout mode, async servers", "samples with the model's generate"),
    VerlKey("actor_rollout_ref.rollout.dtype", "the rollout engine's dtype",
            "samples with the training model itself, in the actor's dtype"),
    VerlKey("actor_rollout_ref.rollout.tensor_model_parallel_size", "GPUs per vLLM-Omni rollout replica",
            f"{ONE_PROCESS} (honours 1)", _equals(1)),
    VerlKey("actor_rollout_ref.rollout.gpu_memory_utilization", "vLLM-Omni's share of each GPU for weights and KV cache",
            "reserves no share: generate allocates as it goes"),
    VerlKey("actor_rollout_ref.rollout.max_num_seqs", "vLLM-Omni's concurrent sequences",
            "generates a step's samples with the model's generate"),
    VerlKey("actor_rollout_ref.rollout.max_num_batched_tokens", "vLLM-Omni's tokens per scheduler step",
            "generates a step's samples with the model's generate"),
    VerlKey("actor_rollout_ref.rollout.cudagraph_capture_sizes", "batch sizes vLLM-Omni captures CUDA graphs for",
            "captures no CUDA graphs"),
    VerlKey("actor_rollout_ref.rollout.enforce_eager", "vLLM-Omni without CUDA graphs",
            "runs eagerly (honours true)", _equals(True)),
    VerlKey("actor_rollout_ref.rollout.free_cache_engine", "vLLM-Omni sleeps while the actor trains",
            "has no separate rollout engine"),
    VerlKey("actor_rollout_ref.rollout.enable_rollout_routing_replay",
            "records each token's experts in the rollout for the actor to replay (MoE models)",
            "samples with the actor's own module, so its routing is the actor's: nothing to replay (honours false)",
            _equals(False)),
    VerlKey("actor_rollout_ref.rollout.enable_prefix_caching", "vLLM's prefix cache",
            "has no prefix cache (honours false)", _equals(False)),
    VerlKey("actor_rollout_ref.rollout.load_format",
            "how vLLM-Omni loads its first weights; dummy: random, then the actor's synced in",
            "samples from the training model itself"),
    VerlKey("actor_rollout_ref.rollout.prompt_length",
            "the rollout's prompt budget: a longer multimodal prompt fails, a text one is left-truncated",
            "drops prompts over data.max_prompt_length before sampling (honours a budget of at least that)",
            lambda value, config: value >= config.data.max_prompt_length),
    VerlKey("actor_rollout_ref.rollout.agent.num_workers", "verl's agent-loop worker processes",
            "runs the agent loop in its one process"),
    VerlKey("actor_rollout_ref.rollout.engine_kwargs.vllm_omni.max_num_seqs", "vLLM-Omni's concurrent sequences",
            "generates a step's samples with the model's generate"),
    VerlKey("actor_rollout_ref.rollout.engine_kwargs.vllm_omni.output_mode",
            "verl-omni: the server's output mode, ar for autoregressive tokens",
            "samples token by token (honours ar, the one mode the loader accepts)", _always),
    # -- log-prob passes: the local engine sizes them as the update's micro-batches
    *(
        VerlKey(f"actor_rollout_ref.{role}.log_prob_{name}", f"sizing of verl's {what} pass",
                f"computes {what} on the update's micro-batches (honours actor_rollout_ref.actor.{actor_key})",
                _actor(actor_key))
        for role, what in (("ref", "reference log-prob"), ("rollout", "old log-prob"))
        for name, actor_key in (("micro_batch_size_per_gpu", "ppo_micro_batch_size_per_gpu"),
                                ("use_dynamic_bsz", "use_dynamic_bsz"),
                                ("max_token_len_per_gpu", "ppo_max_token_len_per_gpu"))
    ),
    # -- data, reward, trainer loop
    VerlKey("data.truncation", "what verl's dataset does with an overlong prompt; verl 0.9.1 reads it and applies nothing",
            "drops overlong prompts and truncates none (honours error; offline preference runs honour every "
            "value: how a long answer is cut)",
            lambda value, config: value == "error" or config.algorithm.sample_source == "offline"),
    VerlKey("data.filter_overlong_prompts", "drop prompts over data.max_prompt_length",
            "always drops them, counted in the step line (honours true)", _equals(True)),
    VerlKey("data.filter_overlong_prompts_workers", "processes verl's dataset filters with",
            "filters in its one process (honours 1)", _equals(1)),
    VerlKey("data.val_max_samples", "how many validation rows verl uses, -1 for all",
            "validates the first data.val_batch_size rows; set data.val_batch_size instead (offline "
            "preference runs honour it: validation pairs, split over the modalities)",
            lambda value, config: config.algorithm.sample_source == "offline"),
    VerlKey("data.validation_shuffle", "shuffle the validation rows", "validates in file order (honours false)",
            _equals(False)),
    VerlKey("reward.reward_manager.source", "where verl finds its reward manager class",
            "scores each response with its data source's scorer, as verl's registered naive manager does "
            "(honours register)", _equals("register")),
    VerlKey("reward.reward_manager.name", "verl's reward manager class",
            "scores each response with its data source's scorer, as verl's naive manager does (honours naive)",
            _equals("naive")),
    VerlKey("trainer.balance_batch", "reorder each batch so verl's data-parallel ranks get equal token counts",
            "has one rank (honours false)", _equals(False)),
    VerlKey("trainer.critic_warmup", "critic-only steps before the actor trains",
            "has no critic (honours 0)", _equals(0)),
    # -- distillation's teacher pool (verl: a vLLM-Omni server of its own)
    VerlKey("distillation.nnodes", "nodes of the teacher's GPU pool", "runs the teacher in its own process"),
    VerlKey("distillation.n_gpus_per_node", "GPUs per node of the teacher's pool", "runs the teacher in its own process"),
    VerlKey("distillation.teacher_models.teacher_model.inference.*", "the teacher's vLLM-Omni server",
            "runs the teacher with transformers in its own process"),
    # -- the one-step-off and fully-async trainers' rollout pool (async_training.max_staleness >= 1)
    VerlKey("rollout.nnodes", "nodes of the asynchronous rollout's own GPU pool",
            "samples asynchronously in a thread of its one process"),
    VerlKey("rollout.n_gpus_per_node", "GPUs per node of the asynchronous rollout's pool",
            "samples asynchronously in a thread of its one process"),
    VerlKey("rollout.total_rollout_steps", "prompts verl's fully-async rollout draws in all",
            "runs trainer.total_training_steps steps of data.train_batch_size prompts"),
    # -- verl's fully-async trainer (async_training.max_staleness >= 2)
    VerlKey("async_training.staleness_threshold", "how far verl's fully-async rollout runs ahead",
            "samples at most max_staleness steps ahead"),
    VerlKey("async_training.trigger_parameter_sync_step", "steps between verl's weight syncs",
            "hands its sampling thread every update (honours 1)", _equals(1)),
    VerlKey("async_training.require_batches", "mini-batches a fully-async step collects",
            "trains on data.train_batch_size prompts a step"),
    VerlKey("async_training.partial_rollout", "verl aborts requests at a weight sync and resumes them",
            "finishes every sample with the weights it started with (honours false)", _equals(False)),
    VerlKey("async_training.concurrent_samples_per_replica", "requests in flight per verl rollout replica",
            "samples a step's prompts in one batch"),
    VerlKey("async_training.use_trainer_do_validate", "validation on the trainer's GPUs",
            "validates in its one process (honours false)", _equals(False)),
    VerlKey("async_training.use_dynamic_resource_scheduling", "trainer GPUs lent to the rollout",
            "shares its one device (honours false)", _equals(False)),
    VerlKey("actor_rollout_ref.rollout.checkpoint_engine.*",
            "how the actor's weights reach rollout replicas on ranks of their own",
            "hands its sampling thread the trainable weights in memory"),
)
"""Every verl-engine key of the schema and what the local engine does with it."""


def verl_key(key: str) -> VerlKey | None:
    """The entry covering the dotted ``key``, or ``None`` for a key both engines read."""
    return next((spec for spec in VERL_KEYS if spec.covers(key)), None)


def local_refusals(config: Config) -> list[str]:
    """One problem per verl-engine key the overrides gave whose value the local engine does
    not honour, each naming the key, what verl does with it and what the local engine does."""
    problems = engine_refusals(config, "local", set(config.given_keys))  # the declared ones (omni_trainer.keys)
    for key in config.given_keys:
        spec = verl_key(key)
        if spec is None:
            continue
        owner = spec.key[:-2] if spec.key.endswith(".*") else spec.key
        if spec.honoured(value_at(config, owner), config):
            continue
        problems.append(
            f"{key}={shown(value_at(config, key))} is a verl-engine setting ({spec.verl}); the local engine "
            f"{spec.local}. Drop it, or use trainer.engine=verl"
        )
    return problems
