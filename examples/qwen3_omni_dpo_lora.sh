#!/usr/bin/env bash
# Omni-Preference offline DPO for Qwen3-Omni-30B-A3B: thinker-only LoRA r=32 on attention and on
# the MoE experts' fused parameters, beta 0.1 with conservative label smoothing 0.1, as
# verl-omni's run_qwen3_omni_omni_preference_lora.sh (4 x H800 there: 32 pairs a step,
# mini-batches of 8 pairs, lr 1e-6 cosine after 3% warm-up, 200 steps; validation on 96 pairs split evenly over
# the modalities). One difference: LoRA dropout 0, not verl-omni's 0.05, since PEFT's LoRA on
# parameters (the experts) refuses dropout (peft 0.21: "ParamWrapper does not work with lora_dropout").
# Data: uv run trainer convert omni_preference --input <Omni-Preference release> --output-dir ~/data/omni_preference
#       (writes {image,video,audio}/{train,test}.parquet).
# verl engine: its FSDP actor workers on one node of 4 GPUs, no rollout or reward workers, as
# verl-omni runs it. ENGINE=local runs it on the local engine (one process), without the
# verl-only keys below. Any key can be overridden after the script, e.g.:
#   bash examples/<this script> trainer.total_training_steps=400
set -euo pipefail
ENGINE=${ENGINE:-verl}
MODEL_PATH=${MODEL_PATH:-$HOME/models/Qwen/Qwen3-Omni-30B-A3B-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/omni_preference}
MODALITIES=${MODALITIES:-image video audio}

train_files=() val_files=()
for modality in $MODALITIES; do
    train_files+=("$DATA_DIR/$modality/train.parquet")
    val_files+=("$DATA_DIR/$modality/test.parquet")
done
join() { local IFS=,; echo "$*"; }

verl_only=(
    trainer.nnodes=1
    trainer.n_gpus_per_node=4
)
if [ "$ENGINE" != verl ]; then verl_only=(); fi

exec uv run trainer \
    trainer.engine="$ENGINE" \
    algorithm.trainer_type=direct_preference \
    algorithm.sample_source=offline \
    algorithm.paired_preference=true \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    data.train_files="[$(join "${train_files[@]}")]" \
    data.val_files="[$(join "${val_files[@]}")]" \
    data.train_batch_size=32 \
    data.val_max_samples=96 \
    data.balance_max_samples_by_modality=true \
    data.max_prompt_length=4096 \
    data.on_bad_row=skip \
    actor_rollout_ref.model.enable_gradient_checkpointing=true \
    actor_rollout_ref.model.lora_rank=32 \
    actor_rollout_ref.model.lora_alpha=64 \
    actor_rollout_ref.model.lora_dropout=0 \
    "actor_rollout_ref.model.target_modules=[q_proj,k_proj,v_proj,o_proj]" \
    "actor_rollout_ref.model.target_parameters=[gate_up_proj,down_proj]" \
    "actor_rollout_ref.model.exclude_modules=.*talker.*|.*code2wav.*|.*code_predictor.*|.*visual.*|.*audio_tower.*" \
    actor_rollout_ref.actor.omni_loss.loss_mode=dpo \
    actor_rollout_ref.actor.omni_loss.loss_type=sigmoid \
    actor_rollout_ref.actor.omni_loss.beta=0.1 \
    actor_rollout_ref.actor.omni_loss.label_smoothing=0.1 \
    actor_rollout_ref.actor.omni_loss.average_log_prob=false \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.optim.lr_scheduler_type=cosine \
    actor_rollout_ref.actor.optim.lr_warmup_steps=6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \
    trainer.experiment_name=qwen3_omni_omni_preference_dpo_lora \
    trainer.total_training_steps=200 \
    trainer.val_before_train=false \
    trainer.test_freq=50 \
    trainer.save_freq=50 \
    "${verl_only[@]}" \
    "$@"
