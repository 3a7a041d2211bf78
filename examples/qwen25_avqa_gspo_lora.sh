#!/usr/bin/env bash
# AVQA-R1-6K (image + audio -> text, four-way choice) on Qwen2.5-Omni-7B, one 80 GB GPU:
# GSPO + GRPO advantages, LoRA r=32 on q/k/v/o of the thinker, verl engine with a colocated
# vLLM-Omni rollout (pipeline qwen2_5_omni, thinker only). Not yet run on a GPU.
# Data: uv run trainer convert avqa --input <AVQA dir> --output-dir ~/data/avqa
#
# Sizing (one GPU of ~79 GiB usable; thinker ~8.9e9 parameters, bf16 ~16.6 GiB, 28 layers,
# 4 KV heads x 128: 56 KiB of KV cache per token; the talker and token2wav are not loaded):
# - batch 32 prompts x n=16 = 512 samples per step, the per-GPU load of the seeds' recipe
#   (128 x 16 on 4 GPUs); ppo_mini_batch_size=8 keeps its 4 updates per step.
# - rollout: `uv run trainer plan-memory --params 8.9e9 --layers 28 --kv-heads 4 --head-dim 128
#   --dtype-bytes 2 --gpu-gib 79 --reserved-gib 21 --prompt-length 4096 --response-length 512
#   --audio-fraction 1 --image-fraction 1` (21 GiB reserved: the actor's bf16 weights stay on
#   the GPU while vLLM-Omni runs) -> gpu_memory_utilization=0.50, max_num_seqs=256, graphs up
#   to 256; the KV pool (~23 GiB) holds ~93 full 4608-token sequences.
# - actor: LoRA leaves the base frozen (no optimizer state for it; ~20M trainable parameters),
#   gradient checkpointing on, 2 sequences per micro-batch (<= 9.2k tokens; their fp32 logits
#   over the 152k vocabulary take ~5.6 GB).
# ENGINE=local runs it on the local engine (the tiny model on a CPU), without the verl-only keys
# below (the local engine refuses a verl-engine key it cannot honour).
# Any key can be overridden after the script, e.g.: bash examples/<this script> trainer.total_epochs=2
set -euo pipefail
ENGINE=${ENGINE:-verl}
MODEL_PATH=${MODEL_PATH:-$HOME/models/Qwen/Qwen2.5-Omni-7B}
TRAIN_FILE=${TRAIN_FILE:-$HOME/data/avqa/train.parquet}
VAL_FILE=${VAL_FILE:-$HOME/data/avqa/validation.parquet}

verl_only=(
    actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5
    actor_rollout_ref.rollout.max_num_seqs=256
    "actor_rollout_ref.rollout.cudagraph_capture_sizes=[1,2,4,8,16,32,64,128,256]"
    trainer.nnodes=1
    trainer.n_gpus_per_node=1
)
if [ "$ENGINE" != verl ]; then verl_only=(); fi

exec uv run trainer \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    data.train_files="[$TRAIN_FILE]" \
    data.val_files="[$VAL_FILE]" \
    data.train_batch_size=32 \
    data.max_prompt_length=4096 \
    data.max_response_length=512 \
    actor_rollout_ref.model.lora_rank=32 \
    actor_rollout_ref.model.lora_alpha=64 \
    "actor_rollout_ref.model.target_modules=[q_proj,k_proj,v_proj,o_proj]" \
    actor_rollout_ref.model.enable_gradient_checkpointing=true \
    actor_rollout_ref.actor.policy_loss.loss_mode=gspo \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
    actor_rollout_ref.actor.optim.lr=3e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \
    actor_rollout_ref.rollout.n=16 \
    actor_rollout_ref.rollout.pipeline_name=qwen2_5_omni \
    algorithm.adv_estimator=grpo \
    trainer.engine="$ENGINE" \
    trainer.experiment_name=qwen2_5_omni_avqa_gspo_lora \
    trainer.test_freq=10 \
    "${verl_only[@]}" \
    "$@"
