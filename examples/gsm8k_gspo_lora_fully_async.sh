#!/usr/bin/env bash
# gsm8k_gspo_lora_one_step_off.sh (GSM8K, GSPO, thinker LoRA; the actor on 4 GPUs, vLLM-Omni on
# the other 4, NCCL, bypass mode) with verl's fully-async trainer and verl-omni's fully-async
# defaults (omni_megatron_trainer.yaml, whose actor is Megatron; ours is FSDP): the rollout
# streams each prompt's 16 responses into a queue, a step trains on one mini-batch of 32 prompts
# (require_batches=1), the replicas take the actor's weights every 4 steps
# (trigger_parameter_sync_step=4), the rollout draws at most 10% beyond a sync's prompts ahead
# (staleness_threshold=0.1), and a sync aborts running requests, which resume with the new
# weights (partial_rollout=true).
# Those knobs let a response lag the actor by up to 4 + ceil(1.1 x 4) - 1 = 8 updates, which
# async_training.max_staleness=8 states (the pre-flight refuses a smaller bound). verl counts a
# step per weight sync: trainer.test_freq, save_freq and total_training_steps count syncs.
# ENGINE=local runs the same recipe on the local engine (a sampling thread with a copy of the
# policy, up to 8 versions ahead), without the verl-only keys below.
# Any key can be overridden after the script, e.g.: bash examples/<this script> trainer.total_epochs=2
set -euo pipefail
ENGINE=${ENGINE:-verl}

verl_only=(
    async_training.staleness_threshold=0.1
    async_training.trigger_parameter_sync_step=4
    async_training.partial_rollout=true
    async_training.concurrent_samples_per_replica=16
)
if [ "$ENGINE" != verl ]; then verl_only=(); fi

ENGINE="$ENGINE" exec bash "$(dirname "$0")/gsm8k_gspo_lora_one_step_off.sh" \
    data.train_batch_size=32 \
    async_training.max_staleness=8 \
    trainer.experiment_name=qwen3_omni_gsm8k_gspo_lora_fully_async \
    "${verl_only[@]}" \
    "$@"
