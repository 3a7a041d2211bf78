#!/usr/bin/env bash
# GPU smoke checks (one CUDA GPU, a few minutes): the local engine on the GPU (local_smoke.py),
# every test marked `gpu` under tests/gpu (vLLM-Omni), then the verl engine smoke (3 GSPO steps
# on the tiny model, verl + vLLM-Omni colocated; 2 steps of on-policy distillation with a
# vLLM-Omni teacher on the same GPU; 2 GSPO steps on image+audio prompts). Each part is sized
# to fit 8 minutes on one H200 (not yet measured).
# Usage: [PARTS=local,vllm,verl-gspo,verl-opd,verl-mm] bash tests/gpu/run_gpu_smoke.sh [extra pytest args]
# Talker RL needs a real checkpoint: PARTS=verl-talker OMNI_RL_QWEN3_OMNI_CKPT=/ckpt/Qwen3-Omni-30B-A3B-Instruct
# verl's one-step-off trainer needs two GPUs (actor and rollout on one each): PARTS=verl-async
# verl's fully-async trainer, likewise: PARTS=verl-fully-async
#
# Which Python: with `uv` on PATH, the workspace environment synced from the lock (gpu and
# distributed extras). Without uv, or with OMNI_RL_PYTHON=<interpreter> (e.g. python), that
# interpreter -- a machine's own torch/transformers/peft -- runs this checkout uninstalled:
# PYTHONPATH gets packages/*/src and apps/trainer/src, and OMNI_RL_MODEL_MODULES (unless set)
# the modules the checkout's model packages declare as `omni_rl.models` entry points. Parts
# whose packages that interpreter lacks (vLLM + vLLM-Omni; verl + Ray) are skipped, saying so.
# DRY_RUN=1 prints what would run (no GPU needed, nothing synced).
set -euo pipefail
cd "$(dirname "$0")/../.."
DRY_RUN="${DRY_RUN:-0}"

if [[ "$DRY_RUN" != 1 ]]; then
    if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
        echo "run_gpu_smoke.sh: no CUDA GPU visible (nvidia-smi failed); nothing to run." >&2
        exit 1
    fi
    nvidia-smi -L
fi

# has MODULE...: the chosen interpreter can import every one of them (the lock has them all).
if [[ -z "${OMNI_RL_PYTHON:-}" ]] && command -v uv >/dev/null 2>&1; then
    [[ "$DRY_RUN" == 1 ]] || uv sync --frozen --extra gpu --extra distributed
    py=(uv run --frozen --extra gpu --extra distributed python)
    has() { true; }
else
    py=("${OMNI_RL_PYTHON:-$(command -v python || command -v python3 || true)}")
    [[ -n "${py[0]}" ]] || { echo "run_gpu_smoke.sh: no uv and no python on PATH; set OMNI_RL_PYTHON" >&2; exit 1; }
    has() {
        "${py[@]}" -c 'import importlib.util, sys; sys.exit(not all(importlib.util.find_spec(m) for m in sys.argv[1:]))' "$@"
    }
    src="$(printf '%s:' "$PWD"/packages/*/src)$PWD/apps/trainer/src"
    export PYTHONPATH="$src${PYTHONPATH:+:$PYTHONPATH}"
    if [[ -z "${OMNI_RL_MODEL_MODULES:-}" ]]; then
        OMNI_RL_MODEL_MODULES="$("${py[@]}" - <<'EOF'
import glob, tomllib
modules = []
for path in sorted(glob.glob("packages/*/pyproject.toml")):
    with open(path, "rb") as handle:
        project = tomllib.load(handle).get("project", {})
    modules += project.get("entry-points", {}).get("omni_rl.models", {}).values()
print(",".join(modules))
EOF
)"
        export OMNI_RL_MODEL_MODULES
    fi
    echo "run_gpu_smoke.sh: ${py[0]} on this checkout (no uv sync); OMNI_RL_MODEL_MODULES=$OMNI_RL_MODEL_MODULES"
fi

run() {
    if [[ "$DRY_RUN" == 1 ]]; then echo "would run: $*"; else "$@"; fi
}

# Keep the tiny model's build cache inside the run so nothing is read from a stale home.
export OMNI_RL_CACHE="${OMNI_RL_CACHE:-$(mktemp -d)}"
# PARTS (default: all) runs a subset, so each part fits a short device session:
#   local: the local engine on the GPU; vllm: the vLLM-Omni tests (our verl server on a real
#   AsyncOmni); verl-gspo, verl-opd, verl-mm, verl-talker, verl-async, verl-fully-async (not in the default): the phases of
#   verl_smoke.py.
PARTS="${PARTS:-local,vllm,verl-gspo,verl-opd,verl-mm}"
if [[ ",$PARTS," == *",local,"* ]]; then
    run "${py[@]}" tests/gpu/local_smoke.py
fi
if [[ ",$PARTS," == *",vllm,"* ]]; then
    if has vllm vllm_omni pytest; then
        run "${py[@]}" -m pytest tests/gpu -m gpu -q -x "$@"
    else
        echo "run_gpu_smoke.sh: skipping vllm: ${py[*]} cannot import vllm, vllm_omni and pytest (the gpu extra)"
    fi
fi
phases=()
[[ ",$PARTS," == *",verl-gspo,"* ]] && phases+=(gspo)
[[ ",$PARTS," == *",verl-opd,"* ]] && phases+=(opd)
[[ ",$PARTS," == *",verl-mm,"* ]] && phases+=(mm)
[[ ",$PARTS," == *",verl-talker,"* ]] && phases+=(talker)
[[ ",$PARTS," == *",verl-async,"* ]] && phases+=(async)
[[ ",$PARTS," == *",verl-fully-async,"* ]] && phases+=(fully-async)
if (( ${#phases[@]} )); then
    if has verl ray vllm vllm_omni; then
        run env VERL_SMOKE_PHASES="$(IFS=,; echo "${phases[*]}")" "${py[@]}" tests/gpu/verl_smoke.py
    else
        echo "run_gpu_smoke.sh: skipping the verl phases (${phases[*]}): ${py[*]} cannot import verl, ray," \
             "vllm and vllm_omni (the distributed and gpu extras)"
    fi
fi
