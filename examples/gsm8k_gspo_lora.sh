#!/usr/bin/env bash
# GSM8K (text -> text), GSPO + GRPO advantages, LoRA r=32 on q/k/v/o of the thinker.
# Data: uv run trainer convert gsm8k --input <gsm8k files> --output-dir ~/data/gsm8k
# verl engine, one node of 4 x 80 GB GPUs, sized as verl-omni's recipe (4 x H800): rollout
# tensor_model_parallel_size=2 at gpu_memory_utilization=0.8; the actor's parameters
# and optimizer state stay on the CPU while vLLM-Omni holds the GPU (the pre-flight checks the
# rollout's weights per GPU against its share).
# ENGINE=local runs it on the local engine (the tiny model on a CPU), without the verl-only keys
# below (the local engine refuses a verl-engine key it cannot honour).
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
    trainer.nnodes=1
    trainer.n_gpus_per_node=4
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
    trainer.engine="$ENGINE" \
    trainer.experiment_name=qwen3_omni_gsm8k_gspo_lora \
    trainer.test_freq=10 \
    "${verl_only[@]}" \
    "$@"
