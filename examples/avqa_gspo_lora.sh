#!/usr/bin/env bash
# AVQA-R1-6K (image + audio -> text, four-way choice), GSPO + GRPO advantages, LoRA r=32 on q/k/v/o of the thinker.
# Data: uv run trainer convert avqa --input <AVQA dir> --output-dir ~/data/avqa
# Any key can be overridden after the script, e.g.: bash examples/<this script> trainer.total_epochs=2
set -euo pipefail
MODEL_PATH=${MODEL_PATH:-$HOME/models/Qwen/Qwen3-Omni-30B-A3B-Instruct}
TRAIN_FILE=${TRAIN_FILE:-$HOME/data/avqa/train.parquet}
VAL_FILE=${VAL_FILE:-$HOME/data/avqa/validation.parquet}

exec uv run trainer \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    data.train_files="[$TRAIN_FILE]" \
    data.val_files="[$VAL_FILE]" \
    data.train_batch_size=128 \
    data.max_prompt_length=4096 \
    data.max_response_length=512 \
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
    trainer.experiment_name=qwen3_omni_avqa_gspo_lora \
    trainer.test_freq=10 \
    "$@"
