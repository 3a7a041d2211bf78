#!/usr/bin/env bash
# OmniVideo-R1 QI (a video heard with its own soundtrack -> time-grounded captions, reasoning and
# an answer), GSPO + GRPO advantages, full fine-tune of the thinker's language model (the vision
# and audio towers frozen), paid by Eq. (8) of the paper: format + answer + half of the judge's
# caption consistency and segment completeness (omni_rewards.scorers.omnivideo_qi_judge).
# Data: uv run trainer convert omnivideo_qi --input merged_train_all_qi.jsonl --audio-from-video \
#           --path-map ./data=<where the release's videos are> --output-dir ~/data/omnivideo_r1_qi
# Sized as verl-omni's recipe (run_qwen3_omni_thinker_gspo_npu_omnivideo_qi_v1.sh, 16 NPUs): 32
# prompts x 8 samples a step in mini-batches of 16, prompts up to 24576 tokens, answers up to 8192,
# lr 1e-6 with 5% warm-up, weight decay 0.1, gradients clipped at 1.0, a low-variance KL loss
# (0.03), GSPO's clip range 3e-4/4e-4 (clip_ratio_c 10), frames at 2 fps, greedy validation
# before training and every 10 steps, one epoch. The judge is Qwen3-VL-8B-Instruct, greedy, at
# most 256 tokens an answer, prompts up to 32768 tokens, 32 images a prompt.
# Deliberate difference: verl-omni shares its 16 devices between the trainer and the judge
# (reward.reward_model.enable_resource_pool=false); verl 0.9.1 then scores without the rows' data
# (see the README, "A judge model as the reward"), so here the judge has 8 GPUs of its own (one
# vLLM replica, tensor_model_parallel_size=8) and the actor and vLLM-Omni share the other 8: two
# nodes of 8 x 80 GB GPUs in one Ray cluster (start it with examples/ray_multinode.sh head / worker,
# then: NNODES=1 bash examples/ray_multinode.sh run examples/omnivideo_qi_gspo.sh).
# JUDGE_URL=<an OpenAI-compatible server> asks a judge you run yourself instead, as verl-omni's
# OMNIVIDEO_QI_JUDGE_URL does (then no judge is served).
# ENGINE=local runs it on the local engine (the tiny model on a CPU, the judge in-process; for
# the tiny QI judge: JUDGE_PATH=$(uv run trainer tiny-judge --qi)), without the verl-only keys.
# Any key can be overridden after the script, e.g.: bash examples/<this script> trainer.total_epochs=2
set -euo pipefail
ENGINE=${ENGINE:-verl}
MODEL_PATH=${MODEL_PATH:-$HOME/models/Qwen/Qwen3-Omni-30B-A3B-Instruct}
JUDGE_PATH=${JUDGE_PATH:-$HOME/models/Qwen/Qwen3-VL-8B-Instruct}
TRAIN_FILE=${TRAIN_FILE:-$HOME/data/omnivideo_r1_qi/train.parquet}
VAL_FILE=${VAL_FILE:-$HOME/data/omnivideo_r1_qi/validation.parquet}
JUDGE_URL=${JUDGE_URL:-}

judge=(
    reward.reward_model.enable=true
    reward.reward_model.model_path="$JUDGE_PATH"
    reward.reward_model.rollout.do_sample=false
    reward.reward_model.rollout.temperature=0
    reward.reward_model.rollout.prompt_length=32768
    reward.reward_model.rollout.response_length=256
    reward.reward_model.rollout.max_num_seqs=32
)
verl_only=(
    actor_rollout_ref.actor.fsdp_config.param_offload=true
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=true
    actor_rollout_ref.rollout.tensor_model_parallel_size=2
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6
    actor_rollout_ref.rollout.max_num_seqs=64
    trainer.nnodes=1
    trainer.n_gpus_per_node=8
)
if [ -n "$JUDGE_URL" ]; then
    judge=(+reward.custom_reward_function.reward_kwargs.judge_url="$JUDGE_URL")
else
    verl_only+=(
        reward.reward_model.enable_resource_pool=true
        reward.reward_model.nnodes=1
        reward.reward_model.n_gpus_per_node=8
        reward.reward_model.rollout.name=vllm
        reward.reward_model.rollout.tensor_model_parallel_size=8
        reward.reward_model.rollout.gpu_memory_utilization=0.4
        reward.reward_model.rollout.max_model_len=33024
        reward.reward_model.rollout.limit_images=32
    )
fi
if [ "$ENGINE" != verl ]; then verl_only=(); fi

exec uv run trainer \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    data.train_files="[$TRAIN_FILE]" \
    data.val_files="[$VAL_FILE]" \
    data.train_batch_size=32 \
    data.max_prompt_length=24576 \
    data.max_response_length=8192 \
    data.use_audio_in_video=true \
    data.mm_processor_kwargs.fps=2.0 \
    data.mm_processor_kwargs.sampling_rate=16000 \
    actor_rollout_ref.model.lora_rank=0 \
    actor_rollout_ref.actor.policy_loss.loss_mode=gspo \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
    actor_rollout_ref.actor.clip_ratio_low=3e-4 \
    actor_rollout_ref.actor.clip_ratio_high=4e-4 \
    actor_rollout_ref.actor.clip_ratio_c=10.0 \
    actor_rollout_ref.actor.use_kl_loss=true \
    actor_rollout_ref.actor.kl_loss_coef=0.03 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.05 \
    actor_rollout_ref.actor.optim.weight_decay=0.1 \
    actor_rollout_ref.actor.optim.clip_grad=1.0 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.val_kwargs.temperature=0 \
    actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe \
    algorithm.adv_estimator=grpo \
    reward.custom_reward_function.path=pkg://omni_rewards.scorers.omnivideo_qi_judge \
    reward.custom_reward_function.name=compute_score \
    reward.timeout_s=900 \
    "${judge[@]}" \
    trainer.engine="$ENGINE" \
    trainer.experiment_name=qwen3_omni_omnivideo_qi_gspo \
    trainer.total_epochs=1 \
    trainer.test_freq=10 \
    "${verl_only[@]}" \
    "$@"
