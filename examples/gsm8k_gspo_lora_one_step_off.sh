#!/usr/bin/env bash
# GSM8K (text -> text), GSPO + GRPO advantages, LoRA r=32 on q/k/v/o of the thinker, with
# asynchronous rollout: verl's one-step-off trainer samples step t+1's batch while step t trains.
# Data: uv run trainer convert gsm8k --input <gsm8k files> --output-dir ~/data/gsm8k
# verl engine, one node of 8 x 80 GB GPUs: the actor on 4 (FSDP, parameters and optimizer on
# the CPU between phases), vLLM-Omni on the other 4 (two replicas of tensor_model_parallel_size=2,
# never put to sleep), the actor's weights broadcast to them over NCCL after every update.
# As verl-omni's fully-async defaults, the actor trains on the rollout's own log-probs
# (algorithm.rollout_correction.bypass_mode=true): each batch is one policy version old.
# ENGINE=local runs the same recipe on the local engine (a sampling thread with a copy of the
# policy, async_training.max_staleness=1), without the verl-only keys below.
# Any key can be overridden after the script, e.g.: bash examples/<this script> trainer.total_epochs=2
set -euo pipefail
ENGINE=${ENGINE:-verl}
MODEL_PATH=${MODEL_PATH:-$HOME/models/Qwen/Qwen3-Omni-30B-A3B-Instruct}
TRAIN_FILE=${TRAIN_FILE:-$HOME/data/gsm8k/train.parquet}
VAL_FILE=${VAL_FILE:-$HOME/data/gsm8k/test.parquet}

verl_only=(
    actor_rollout_ref.actor.fsdp_config.param_offload=true
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=true
    actor_rollout_ref.rollout.tensor_model_parallel_size=2
    actor_rollout_ref.rollout.gpu_memory_utilization=0.8
    actor_rollout_ref.rollout.checkpoint_engine.backend=nccl
    trainer.nnodes=1
    trainer.n_gpus_per_node=4
    rollout.nnodes=1
    rollout.n_gpus_per_node=4
)
if [ "$ENGINE" != verl ]; then verl_only=(); fi

exec uv run trainer \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    data.train_files="[$TRAIN_FILE]" \
    data.val_files="[$VAL_FILE]" \
    data.train_batch_size=128 \
    data.max_prompt_length=1024 \
    data.max_response_length=1024 \
    actor_rollout_ref.model.lora_rank=32 \
    actor_rollout_ref.model.lora_alpha=64 \
    "actor_rollout_ref.model.target_modules=[q_proj,k_proj,v_proj,o_proj]" \
    actor_rollout_ref.actor.policy_loss.loss_mode=gspo \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
    actor_rollout_ref.actor.optim.lr=3e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.rollout.n=16 \
    actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe \
    algorithm.adv_estimator=grpo \
    algorithm.rollout_correction.bypass_mode=true \
    async_training.max_staleness=1 \
    trainer.engine="$ENGINE" \
    trainer.experiment_name=qwen3_omni_gsm8k_gspo_lora_one_step_off \
    trainer.test_freq=10 \
    "${verl_only[@]}" \
    "$@"
