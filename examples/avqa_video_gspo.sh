#!/usr/bin/env bash
# AVQA on its original videos (a clip seen and heard -> one of four options), GSPO + GRPO
# advantages, full fine-tune of the thinker's language model (the vision and audio towers frozen).
# Data: uv run trainer convert avqa_video --train-json <train_qa.json> --validation-json <val_qa.json> \
#           --video-root <dir of the .mp4 clips> --output-dir ~/data/avqa_video
# Sized as verl-omni's recipe (run_qwen3_omni_megatron_avqa_video_separate_async.sh): 4 prompts x 4
# samples a step, one mini-batch, prompts up to 8192 tokens, answers up to 1024, lr 1e-6, GSPO's
# clip range 3e-4/4e-4 (clip_ratio_c 10), weight decay 0.1, greedy validation before training and
# every 10 steps, 20 steps, on one node of 8 x 80 GB GPUs. verl-omni trains it with Megatron (TP 4,
# EP 4) and its V1 separate-async trainer, the actor on 4 GPUs and vLLM-Omni on the other 4;
# our verl engine trains with FSDP, synchronously, the actor and vLLM-Omni (TP 4) sharing the 8
# GPUs, the actor's parameters and optimizer state on the CPU while vLLM-Omni holds the GPU.
# Each clip is sampled at 1 frame a second, up to 32 frames (the converter writes it in the rows),
# and heard through its soundtrack as an audio item of its own after the frames, as verl-omni's
# NextQARLHFDataset hears it (data.soundtrack_as_audio; not interleaved with the frames).
# ENGINE=local runs it on the local engine (the tiny model on a CPU), without the verl-only keys.
# Any key can be overridden after the script, e.g.: bash examples/<this script> trainer.total_epochs=2
set -euo pipefail
ENGINE=${ENGINE:-verl}
MODEL_PATH=${MODEL_PATH:-$HOME/models/Qwen/Qwen3-Omni-30B-A3B-Instruct}
TRAIN_FILE=${TRAIN_FILE:-$HOME/data/avqa_video/train.parquet}
VAL_FILE=${VAL_FILE:-$HOME/data/avqa_video/validation.parquet}

verl_only=(
    actor_rollout_ref.actor.fsdp_config.param_offload=true
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=true
    actor_rollout_ref.rollout.tensor_model_parallel_size=4
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6
    actor_rollout_ref.rollout.max_num_seqs=32
    trainer.nnodes=1
    trainer.n_gpus_per_node=8
)
if [ "$ENGINE" != verl ]; then verl_only=(); fi

exec uv run trainer \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    data.train_files="[$TRAIN_FILE]" \
    data.val_files="[$VAL_FILE]" \
    data.train_batch_size=4 \
    data.max_prompt_length=8192 \
    data.max_response_length=1024 \
    data.soundtrack_as_audio=true \
    data.mm_processor_kwargs.sampling_rate=16000 \
    actor_rollout_ref.model.lora_rank=0 \
    actor_rollout_ref.actor.policy_loss.loss_mode=gspo \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
    actor_rollout_ref.actor.clip_ratio_low=3e-4 \
    actor_rollout_ref.actor.clip_ratio_high=4e-4 \
    actor_rollout_ref.actor.clip_ratio_c=10.0 \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.optim.weight_decay=0.1 \
    actor_rollout_ref.actor.ppo_mini_batch_size=4 \
    actor_rollout_ref.rollout.n=4 \
    actor_rollout_ref.rollout.val_kwargs.temperature=0 \
    actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe \
    algorithm.adv_estimator=grpo \
    trainer.engine="$ENGINE" \
    trainer.experiment_name=qwen3_omni_avqa_video_gspo \
    trainer.total_training_steps=20 \
    trainer.test_freq=10 \
    "${verl_only[@]}" \
    "$@"
