#!/usr/bin/env bash
# GPU smoke checks (one CUDA GPU, a few minutes): installs the gpu and distributed extras
# into the workspace environment, runs every test marked `gpu` under tests/gpu, then the
# verl engine smoke (3 GSPO steps on the tiny model, verl + vLLM-Omni colocated; 2 steps of
# on-policy distillation with a vLLM-Omni teacher on the same GPU; 2 GSPO steps on
# image+audio prompts). Each part is sized to fit 8 minutes on one H200 (not yet measured).
# Usage: [PARTS=vllm,verl-gspo,verl-opd,verl-mm] bash tests/gpu/run_gpu_smoke.sh [extra pytest args]
# Talker RL needs a real checkpoint: PARTS=verl-talker OMNI_RL_QWEN3_OMNI_CKPT=/ckpt/Qwen3-Omni-30B-A3B-Instruct
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "run_gpu_smoke.sh: no CUDA GPU visible (nvidia-smi failed); nothing to run." >&2
    exit 1
fi
nvidia-smi -L

uv sync --frozen --extra gpu --extra distributed
# Keep the tiny model's build cache inside the run so nothing is read from a stale home.
export OMNI_RL_CACHE="${OMNI_RL_CACHE:-$(mktemp -d)}"
# PARTS (default: all) runs a subset, so each part fits a short device session:
#   vllm: the vLLM-Omni engine tests; verl-gspo, verl-opd, verl-mm, verl-talker (not in the
#   default): the phases of verl_smoke.py.
PARTS="${PARTS:-vllm,verl-gspo,verl-opd,verl-mm}"
if [[ ",$PARTS," == *",vllm,"* ]]; then
    uv run --frozen --extra gpu --extra distributed pytest tests/gpu -m gpu -q -x "$@"
fi
phases=()
[[ ",$PARTS," == *",verl-gspo,"* ]] && phases+=(gspo)
[[ ",$PARTS," == *",verl-opd,"* ]] && phases+=(opd)
[[ ",$PARTS," == *",verl-mm,"* ]] && phases+=(mm)
[[ ",$PARTS," == *",verl-talker,"* ]] && phases+=(talker)
if (( ${#phases[@]} )); then
    VERL_SMOKE_PHASES="$(IFS=,; echo "${phases[*]}")" \
        uv run --frozen --extra gpu --extra distributed python tests/gpu/verl_smoke.py
fi
