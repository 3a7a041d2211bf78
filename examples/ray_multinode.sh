#!/usr/bin/env bash
# Multi-node runs of the verl engine: start Ray on every node, then run the same recipe
# command on the head node with trainer.engine=verl. Every node needs the same checkout,
# `uv sync --extra distributed --extra gpu`, the model and the data at the same paths.
#
#   head node:    bash examples/ray_multinode.sh head
#   other nodes:  bash examples/ray_multinode.sh worker <head_ip>:6379
#   head node:    NNODES=2 GPUS_PER_NODE=8 bash examples/ray_multinode.sh run examples/gsm8k_gspo_lora.sh [key=value ...]
#   afterwards:   bash examples/ray_multinode.sh stop   (on every node)
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${RAY_PORT:-6379}
case "${1:-}" in
    head)
        uv run --extra distributed ray start --head --port="$PORT" ;;
    worker)
        uv run --extra distributed ray start --address="${2:?usage: worker <head_ip>:$PORT}" ;;
    run)
        script=${2:?usage: run <recipe script> [key=value ...]}
        shift 2
        exec bash "$script" \
            trainer.engine=verl \
            ray_kwargs.ray_init.address=auto \
            trainer.nnodes="${NNODES:-2}" \
            trainer.n_gpus_per_node="${GPUS_PER_NODE:-8}" \
            "$@" ;;
    stop)
        uv run --extra distributed ray stop ;;
    *)
        sed -n 2,10p "$0"; exit 2 ;;
esac
