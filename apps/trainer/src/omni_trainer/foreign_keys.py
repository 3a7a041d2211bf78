"""verl's and verl-omni's keys that no engine here reads, each with why and what to use instead.

verl-omni's launchers carry keys of engines and features omni-rl does not have (Megatron,
VeOmni, Ascend NPUs, verl's V1 asynchronous trainer modes, DAPO's dynamic
sampling). A key of the schema is declared in :mod:`omni_trainer.config`; these are not in it,
so a run that sets one stops with its theme's reason and alternative (one problem per key)
instead of "unknown key". The themes were drawn from every Qwen3-Omni launcher of verl-omni
(``apps/trainer/tests/engines/verl/test_foreign_keys.py`` holds one key of each).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ForeignTheme:
    """Keys of one engine or feature omni-rl does not have: ``prefixes`` (a key itself, or a
    section: every key below it), ``suffixes`` (keys ending so, anywhere), and the message."""

    prefixes: tuple[str, ...]
    why: str
    instead: str
    suffixes: tuple[str, ...] = ()

    def covers(self, key: str) -> bool:
        return (any(key == p or key.startswith(p + ".") for p in self.prefixes)
                or any(key.endswith(s) for s in self.suffixes))


FSDP_INSTEAD = ("the verl engine trains the actor with FSDP (actor_rollout_ref.actor.strategy=fsdp2) over trainer.nnodes "
                "x trainer.n_gpus_per_node, offloads with actor_rollout_ref.actor.fsdp_config.param_offload and "
                "optimizer_offload, and keeps the vision and audio towers frozen; drop it")
THEMES: tuple[ForeignTheme, ...] = (
    ForeignTheme(
        ("actor_rollout_ref.actor.megatron", "actor_rollout_ref.ref.megatron",
         "actor_rollout_ref.actor.optim.use_precision_aware_optimizer",
         "actor_rollout_ref.actor.optim.override_optimizer_config", "actor_rollout_ref.actor.optim.lr_decay_steps",
         "actor_rollout_ref.actor.optim.total_training_steps"),
        "a setting of verl's Megatron engine (verl-omni's Megatron launchers)", FSDP_INSTEAD),
    ForeignTheme(
        ("model_engine", "diffusion/model_engine", "actor_rollout_ref.actor.veomni", "actor_rollout_ref.ref.veomni",
         "actor_rollout_ref.actor.veomni_config", "actor_rollout_ref.ref.veomni_config",
         "actor_rollout_ref.model.use_fused_kernels"),
        "a setting of verl's VeOmni engine (verl-omni's VeOmni launchers)", FSDP_INSTEAD),
    ForeignTheme(
        ("actor_rollout_ref.model.lora.rank", "actor_rollout_ref.model.lora.alpha", "actor_rollout_ref.model.lora.dropout",
         "actor_rollout_ref.model.lora.target_modules", "actor_rollout_ref.model.lora.type"),
        "a setting of verl's LoRA for its Megatron engine (model.lora, on linear_qkv, linear_proj, ...)",
        "the FSDP actor's LoRA is actor_rollout_ref.model.lora_rank, lora_alpha, lora_dropout and target_modules; "
        "set those and drop it"),
    ForeignTheme(
        ("actor_rollout_ref.rollout.engine_kwargs.vllm_omni.additional_config",
         "distillation.teacher_models.teacher_model.inference.engine_kwargs.vllm_omni.additional_config",
         "distillation.teacher_models.teacher_model.inference.engine_kwargs.vllm_omni.block_size"),
        "a setting of vllm-ascend, vLLM's Ascend NPU build (verl-omni's NPU launchers)",
        "omni-rl runs vLLM-Omni on NVIDIA GPUs and on the CPU, which take no such setting; drop it"),
    ForeignTheme(
        ("trainer.v1", "actor_rollout_ref.rollout.nnodes", "actor_rollout_ref.rollout.n_gpus_per_node",
         "actor_rollout_ref.hybrid_engine"),
        "a setting of verl's V1 asynchronous trainer modes (trainer.v1.trainer_mode colocate_async / separate_async, their "
        "warm-up batches, replay buffer and standalone rollout pool)",
        "the verl engine runs its own synchronous trainer (omni_sync) and asynchronous rollout through "
        "async_training: separate_async's rollout on GPUs of its own, synced every parameter_sync_step=T steps, is "
        "async_training.max_staleness=1 with rollout.nnodes and rollout.n_gpus_per_node (T=1, verl's one-step-off "
        "trainer), or max_staleness >= 2 with async_training.trigger_parameter_sync_step=T (its fully-async "
        "trainer); colocate_async (rollout on the actor's GPUs, a batch ahead) has no equivalent: drop it for a "
        "synchronous run"),
    ForeignTheme(
        ("rollout.n", "data.gen_batch_size"),
        "a setting of verl's fully-async entry point (verl-omni's fully-async launcher)",
        "the fully-async trainer (async_training.max_staleness >= 2) samples actor_rollout_ref.rollout.n responses "
        "a prompt and streams them a prompt at a time; set actor_rollout_ref.rollout.n and drop it"),
    ForeignTheme(
        ("algorithm.filter_groups", "reward.reward_kwargs.overlong_buffer_cfg", "reward.reward_kwargs.max_resp_len"),
        "a setting of DAPO's dynamic sampling or overlong penalty (verl's dapo reward manager, verl-omni's DAPO launchers)",
        "omni-rl has neither: a group whose samples score alike gets no advantage and no update; drop it"),
    ForeignTheme(
        ("actor_rollout_ref.rollout.agent.agent_loop_manager_class",),
        "a replacement of verl's agent-loop manager (verl-omni's NitroBrew distillation)",
        "omni-rl's verl engine installs its own agent loops; on-policy distillation is distillation.enabled=true "
        "with distillation.distillation_loss.loss_mode (kl, k1, ..., forward_kl_topk); drop it"),
    ForeignTheme(
        ("distillation.teacher_models.teacher_model.inference.engine_kwargs",
         "distillation.teacher_models.teacher_model.inference.prompt_length",
         "distillation.teacher_models.teacher_model.inference.response_length",
         "distillation.teacher_models.teacher_model.inference.enable_chunked_prefill",
         "distillation.teacher_models.teacher_model.inference.enable_prefix_caching",
         "distillation.teacher_models.teacher_model.inference.max_num_batched_tokens"),
        "a setting of the teacher's inference engine that omni-rl takes from the student's rollout",
        "the teacher is served by vLLM-Omni (actor_rollout_ref.rollout.name's server) with the student's pipeline "
        "(actor_rollout_ref.rollout.pipeline_name, output mode ar) and lengths (data.max_prompt_length, "
        "data.max_response_length); size it with distillation.teacher_models.teacher_model.inference.* keys "
        "`uv run trainer --print-config` lists; drop it"),
    ForeignTheme(
        ("actor_rollout_ref.rollout.logprobs_mode", "actor_rollout_ref.rollout.calculate_log_probs",
         "actor_rollout_ref.rollout.max_model_len", "actor_rollout_ref.rollout.data_parallel_size",
         "actor_rollout_ref.rollout.pipeline_model_parallel_size", "actor_rollout_ref.rollout.enable_chunked_prefill",
         "actor_rollout_ref.rollout.ignore_eos", "actor_rollout_ref.rollout.layered_summon",
         "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.limit_mm_per_prompt",
         "actor_rollout_ref.rollout.engine_kwargs.vllm_omni.mm_processor_cache_gb"),
        "a vLLM engine setting omni-rl sets itself for the policy's replicas",
        "the rollout returns the sampled tokens' log-probs as the actor computes them, stops at EOS, holds "
        "data.max_prompt_length + data.max_response_length tokens, runs one tensor-parallel group "
        "(actor_rollout_ref.rollout.tensor_model_parallel_size), lets each prompt carry its media, and turns the "
        "multimodal processor cache off across weight syncs; drop it"),
    ForeignTheme(
        ("actor_rollout_ref.model.model_type", "actor_rollout_ref.model.architecture",
         "actor_rollout_ref.model.hf_config_path", "actor_rollout_ref.model.tokenizer_path",
         "actor_rollout_ref.model.trust_remote_code", "data.trust_remote_code", "actor_rollout_ref.model.model_path",
         "actor_rollout_ref.model.config_path", "actor_rollout_ref.model.algorithm"),
        "a model dispatch or loading option of verl-omni's OmniModelConfig",
        "the model, its processor and its training adapter are read from actor_rollout_ref.model.path (its "
        "config.json names the architecture; transformers' own Qwen-Omni classes, no remote code); drop it",
        suffixes=("._target_",)),
    ForeignTheme(
        ("data.custom_cls.collate_fn", "data.mm_configs", "data.pad_mode", "data.max_length", "data.sampler",
         "data.dataloader_num_workers", "data.prompt_key", "data.return_raw_chat"),
        "a setting of verl's or verl-omni's dataset classes",
        "omni-rl's dataset reads the RL (or preference) parquet `uv run trainer convert` writes, pads and collates "
        "itself, and samples offline preference batches with data.train_sampler; drop it"),
    ForeignTheme(
        ("actor_rollout_ref.actor.omni_loss.reference_free",),
        "a setting of reference-free DPO (verl-omni's offline DPO branch)",
        "offline DPO here always scores against its reference (the base model, or the base without the adapter "
        "under LoRA); drop it"),
    ForeignTheme(
        ("actor_rollout_ref.actor.fsdp_config.wrap_policy", "actor_rollout_ref.actor.shuffle",
         "actor_rollout_ref.actor.optim.num_cycles",
         "trainer.rollout_data_dir", "trainer.validation_data_dir"),
        "a verl setting omni-rl does not take",
        "verl's FSDP wraps the model's decoder layers (its default policy); rows are shuffled by data.shuffle; "
        "the learning rate warms up for actor_rollout_ref.actor.optim.lr_warmup_steps steps (or its _ratio), then follows "
        "actor_rollout_ref.actor.optim.lr_scheduler_type (constant, or cosine over half a cycle); validation "
        "samples are logged by trainer.log_val_generations; drop it"),
)


def foreign_message(key: str) -> str | None:
    """Why ``key`` is not taken and what to use instead, for a key of :data:`THEMES`; else ``None``."""
    for theme in THEMES:
        if theme.covers(key):
            return f"{key} is {theme.why}, which omni-rl does not have: {theme.instead}"
    return None
