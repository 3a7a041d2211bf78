#!/usr/bin/env bash
# gsm8k_gspo_lora.sh (GSM8K, GSPO + GRPO advantages, LoRA r=32 on q/k/v/o of the thinker) with
# asynchronous rollout: verl's one-step-off trainer samples step t+1's batch while step t trains.
# verl engine, one node of 8 x 80 GB GPUs: the actor on 4 (the base script's placement and
# offload), vLLM-Omni on the other 4 (two replicas of tensor_model_parallel_size=2, never put
# to sleep), the actor's weights broadcast to them over NCCL after every update.
# As verl-omni's fully-async defaults, the actor trains on the rollout's own log-probs
# (algorithm.rollout_correction.bypass_mode=true): each batch is one policy version old.
# ENGINE=local runs the same recipe on the local engine (a sampling thread with a copy of the
# policy, async_training.max_staleness=1), without the verl-only keys below.
# Any key can be overridden after the script, e.g.: bash examples/<this script> trainer.total_epochs=2
set -euo pipefail
ENGINE=${ENGINE:-verl}

verl_only=(
    actor_rollout_ref.rollout.checkpoint_engine.backend=nccl
    rollout.nnodes=1
    rollout.n_gpus_per_node=4
)
if [ "$ENGINE" != verl ]; then verl_only=(); fi

ENGINE="$ENGINE" exec bash "$(dirname "$0")/gsm8k_gspo_lora.sh" \
    algorithm.rollout_correction.bypass_mode=true \
    async_training.max_staleness=1 \
    trainer.experiment_name=qwen3_omni_gsm8k_gspo_lora_one_step_off \
    "${verl_only[@]}" \
    "$@"
