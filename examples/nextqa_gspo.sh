#!/usr/bin/env bash
# NExT-QA (video -> text, five-way choice; TinyLLaVA-Video-R1's NextQA split), GSPO + GRPO
# advantages, full fine-tune of the thinker's language model (the vision and audio towers frozen).
# Data: uv run trainer convert nextqa --input <dir with nextqa_0-30s.jsonl and the videos> --output-dir ~/data/nextqa
# Sized as verl-omni's recipe (run_qwen3_omni_thinker_gspo_npu_nextqa_v1.sh, FSDP2 on 16 NPUs):
# 32 prompts x 8 samples a step in mini-batches of 16, prompts up to 4096 tokens, answers up to
# 1024, lr 1e-6, GSPO's clip range 3e-4/4e-4, weight decay 0.1, greedy validation every 10 steps,
# 200 steps; here on 2 nodes of 8 x 80 GB GPUs, vLLM-Omni at tensor_model_parallel_size=2.
# Each video is sampled at 1 frame a second, up to 32 frames (the converter writes it in the rows).
# Each video is heard with its own soundtrack, as verl-omni's default (USE_AUDIO_IN_VIDEO=false
# turns it off); vLLM-Omni places it as the actor does through omni-qwen3's vLLM plugin (see the
# README, "A video with its soundtrack").
# ENGINE=local runs it on the local engine (the tiny model on a CPU), without the verl-only keys.
# Any key can be overridden after the script, e.g.: bash examples/<this script> trainer.total_epochs=2
set -euo pipefail
ENGINE=${ENGINE:-verl}
MODEL_PATH=${MODEL_PATH:-$HOME/models/Qwen/Qwen3-Omni-30B-A3B-Instruct}
TRAIN_FILE=${TRAIN_FILE:-$HOME/data/nextqa/train.parquet}
VAL_FILE=${VAL_FILE:-$HOME/data/nextqa/validation.parquet}
USE_AUDIO_IN_VIDEO=${USE_AUDIO_IN_VIDEO:-true}

verl_only=(
    actor_rollout_ref.actor.fsdp_config.param_offload=true
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=true
    actor_rollout_ref.rollout.tensor_model_parallel_size=2
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6
    actor_rollout_ref.rollout.max_num_seqs=128
    trainer.nnodes=2
    trainer.n_gpus_per_node=8
)
if [ "$ENGINE" != verl ]; then verl_only=(); fi

exec uv run trainer \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    data.train_files="[$TRAIN_FILE]" \
    data.val_files="[$VAL_FILE]" \
    data.train_batch_size=32 \
    data.max_prompt_length=4096 \
    data.max_response_length=1024 \
    data.use_audio_in_video="$USE_AUDIO_IN_VIDEO" \
    data.mm_processor_kwargs.sampling_rate=16000 \
    actor_rollout_ref.model.lora_rank=0 \
    actor_rollout_ref.actor.policy_loss.loss_mode=gspo \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
    actor_rollout_ref.actor.clip_ratio_low=3e-4 \
    actor_rollout_ref.actor.clip_ratio_high=4e-4 \
    actor_rollout_ref.actor.clip_ratio_c=10.0 \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.optim.weight_decay=0.1 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.val_kwargs.temperature=0 \
    actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe \
    algorithm.adv_estimator=grpo \
    trainer.engine="$ENGINE" \
    trainer.experiment_name=qwen3_omni_nextqa_gspo \
    trainer.total_training_steps=200 \
    trainer.test_freq=10 \
    "${verl_only[@]}" \
    "$@"
