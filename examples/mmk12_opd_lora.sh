#!/usr/bin/env bash
# MMK12 on-policy distillation (OPD) on the verl engine: the MMK12 GSPO recipe (GRPO
# advantages, LoRA r=32 on q/k/v/o of the thinker) plus a teacher's reverse KL on the
# student's own samples, used as a per-token advantage (loss_mode=kl, use_policy_gradient=true).
# Student: Qwen3-Omni-30B-A3B-Instruct with 25% weight noise; teacher: the original model,
# served by vLLM-Omni (thinker only, AR) on a node of its own. Both share one tokenizer
# (checked before launch).
#
# 1. Student checkpoint (a noised copy of the teacher):
#      uv run trainer model noise --src "$TEACHER_PATH" --out "$MODEL_PATH" --fraction 0.25 --seed 0
# 2. Data: uv run trainer convert mmk12 --input <mmk12 shards> --output-dir ~/data/mmk12
# 3. Two nodes with GPUS_PER_NODE GPUs each, one Ray cluster (see examples/ray_multinode.sh):
#    student actor + rollout on the first node (trainer.nnodes=1), teacher on the second
#    (distillation.nnodes=1, TEACHER_TP GPUs per teacher replica). Same checkout, extras,
#    model and data paths on both nodes. The student is sized as the MMK12 recipe: rollout
#    TP=2 at gpu_memory_utilization=0.8, the actor's parameters and optimizer state offloaded.
#      node 1:  bash examples/ray_multinode.sh head
#      node 2:  bash examples/ray_multinode.sh worker <node1_ip>:6379
#      node 1:  bash examples/mmk12_opd_lora.sh [key=value ...]
#      after:   bash examples/ray_multinode.sh stop   (on both nodes)
# ENGINE=local runs it on the local engine (the tiny model on a CPU), without the verl-only keys
# below (the local engine refuses a verl-engine key it cannot honour).
# Any key can be overridden after the script (e.g. distillation.distillation_loss.use_task_rewards=false).
set -euo pipefail
ENGINE=${ENGINE:-verl}
TEACHER_PATH=${TEACHER_PATH:-$HOME/models/Qwen/Qwen3-Omni-30B-A3B-Instruct}
MODEL_PATH=${MODEL_PATH:-$HOME/models/Qwen3-Omni-30B-A3B-Instruct-noise0.25}
TRAIN_FILE=${TRAIN_FILE:-$HOME/data/mmk12/train.parquet}
VAL_FILE=${VAL_FILE:-$HOME/data/mmk12/test.parquet}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
TEACHER_TP=${TEACHER_TP:-2}

verl_only=(
    actor_rollout_ref.actor.fsdp_config.param_offload=true
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=true
    actor_rollout_ref.rollout.tensor_model_parallel_size=2
    actor_rollout_ref.rollout.gpu_memory_utilization=0.8
    distillation.nnodes=1
    distillation.n_gpus_per_node="$GPUS_PER_NODE"
    distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size="$TEACHER_TP"
    distillation.teacher_models.teacher_model.inference.gpu_memory_utilization=0.6
    distillation.teacher_models.teacher_model.inference.max_model_len=8192
    ray_kwargs.ray_init.address=auto
    trainer.nnodes=1
    trainer.n_gpus_per_node="$GPUS_PER_NODE"
)
if [ "$ENGINE" != verl ]; then verl_only=(); fi

exec uv run trainer \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    data.train_files="[$TRAIN_FILE]" \
    data.val_files="[$VAL_FILE]" \
    data.train_batch_size=128 \
    data.max_prompt_length=4096 \
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
    distillation.enabled=true \
    distillation.teacher_models.teacher_model.model_path="$TEACHER_PATH" \
    distillation.distillation_loss.loss_mode=kl \
    distillation.distillation_loss.use_policy_gradient=true \
    trainer.engine="$ENGINE" \
    trainer.experiment_name=qwen3_omni_mmk12_opd_lora \
    trainer.test_freq=10 \
    "${verl_only[@]}" \
    "$@"
