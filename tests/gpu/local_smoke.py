"""GPU smoke of the local engine (``PARTS=local`` of tests/gpu/run_gpu_smoke.sh): the embedded
default -- the tiny Qwen3-Omni, built offline, learning the built-in task -- for a few steps on
one CUDA GPU in bf16, through the trainer's own entry point in this interpreter.

Needs torch, transformers and peft and the workspace packages, installed or from a checkout
(``PYTHONPATH`` over ``packages/*/src`` and ``apps/trainer/src``, model packages named in
``OMNI_RL_MODEL_MODULES``); no vLLM, verl or Ray. Prints per step: step time, reward,
rollout~actor pearson, log_ppl_diff, then the peak GPU memory. Exit 0 when every step ran with
finite metrics and the rollout's log-probs agree with the actor's.

    python tests/gpu/local_smoke.py [--steps N] [--device cuda|cpu] [key=value ...]

``--device cpu`` runs the same check on the CPU (fp32), as its CPU test does.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

COLUMNS = {
    "step time (s)": "timing_s/step",
    "reward": "critic/score/mean",
    "pearson rollout~actor": "training/rollout_actor_probs_pearson_corr",
    "log_ppl_diff": "rollout_corr/log_ppl_diff",
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args, overrides = parser.parse_known_args(argv)
    import torch

    from omni_trainer.cli import main as trainer

    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"local_smoke: no CUDA device visible (torch {torch.__version__}); use --device cpu on a CPU")
        return 1
    work = Path(tempfile.mkdtemp(prefix="local_smoke_"))
    code = trainer([
        f"trainer.device={args.device}", f"trainer.total_training_steps={args.steps}", "trainer.test_freq=0",
        "trainer.save_freq=0", "trainer.val_before_train=false", f"trainer.default_local_dir={work}", *overrides,
    ])
    if code != 0:
        print(f"FAIL: the trainer exited {code}")
        return 1
    rows = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    problems = []
    if [row["step"] for row in rows] != list(range(1, args.steps + 1)):
        problems.append(f"expected steps 1..{args.steps} in metrics.jsonl, got {[row['step'] for row in rows]}")
    print(f"{'step':>4} | " + " | ".join(f"{name:>22}" for name in COLUMNS))
    for row in rows:
        values = {name: row.get(key) for name, key in COLUMNS.items()}
        print(f"{row['step']:>4.0f} | " + " | ".join(f"{'missing' if v is None else f'{v:.4f}':>22}" for v in values.values()))
        for name, value in values.items():
            if not isinstance(value, float) or not math.isfinite(value):
                problems.append(f"step {row['step']:.0f}: {name} is {value}")
        # The sampler's and the actor's log-probs of the same tokens (bf16 on the GPU): a broken
        # forward or misaligned positions give ~0.
        pearson = values["pearson rollout~actor"]
        if isinstance(pearson, float) and pearson < 0.9:
            problems.append(f"step {row['step']:.0f}: pearson {pearson:.4f} < 0.9 (rollout and actor disagree)")
    if args.device == "cuda":
        print(f"peak GPU memory: {torch.cuda.max_memory_allocated() / 1e9:.2f} GB on {torch.cuda.get_device_name(0)}")
    for problem in problems:
        print("FAIL:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
