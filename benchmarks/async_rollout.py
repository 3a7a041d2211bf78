"""Synchronous vs asynchronous rollout on the local engine, on the embedded default.

Both arms run the same config, seed and steps through ``LocalTrainer`` as ``fit`` does
(``Task.prefetch`` before the loop, ``train_step`` per step), with validation and
checkpoints off:

- ``sync``: the default loop; generation, scoring and the update take turns;
- ``async``: ``async_training.max_staleness=1`` with ``algorithm.rollout_correction.bypass_mode=true``
  (the pre-flight requires it): a thread samples step t+1 with a copy of the policy while the
  actor updates on step t.

Timed with one clock from the end of the first step (the warm-up: both start their workers
and the async thread fills its first batch there) to the end of the last. Generated tokens
are counted per arm (the samples differ: async's are drawn by an older policy). Reported:
steps/s, tokens/s, the reward against wall-clock, and async's waits (the trainer on the
rollout, the thread on a recent enough policy). Raw numbers go to
``outputs/benchmarks/async_rollout.json``.

    uv run python benchmarks/async_rollout.py [--steps 30] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

ARMS: dict[str, list[str]] = {
    "sync": [],
    "async": ["async_training.max_staleness=1", "algorithm.rollout_correction.bypass_mode=true"],
}


def run_arm(name: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from omni_trainer.config import load_config
    from omni_trainer.engines.local.trainer import LocalTrainer
    from omni_trainer.resolved import resolve_run

    trainer = LocalTrainer(resolve_run(load_config([
        f"trainer.total_training_steps={args.steps}", "trainer.test_freq=0", "trainer.save_freq=0",
        f"trainer.default_local_dir={root / name}", f"trainer.seed={args.seed}", *ARMS[name],
    ])))
    trainer.setup()
    engine = trainer.task.engine
    result: dict[str, Any] = {"step_ends": [], "rewards": [], "waits": [], "idle": [], "staleness": []}
    trainer.task.start()
    try:
        trainer.task.prefetch(trainer.prompts_of, 1, trainer.total_steps)
        for step, batch in trainer.batches(0):
            metrics = trainer.train_step(step, batch)
            result["step_ends"].append(time.perf_counter())
            result["rewards"].append(metrics["critic/score/mean"])
            result["waits"].append(metrics.get("timing_s/wait_rollout", 0.0))
            result["idle"].append(metrics.get("timing_s/rollout_idle", 0.0))
            result["staleness"].append(metrics.get("async/staleness", 0.0))
    finally:
        trainer.task.close()
    sampler = getattr(trainer.task, "async_sampler", None)
    generated = (sampler.background.engine if sampler is not None else engine).stats.generated_tokens  # type: ignore[union-attr]
    ends = result["step_ends"]
    result["seconds"] = ends[-1] - ends[0]
    result["steps_per_s"] = (len(ends) - 1) / result["seconds"]
    result["generated_tokens"] = generated
    result["tokens_per_s"] = generated * (len(ends) - 1) / len(ends) / result["seconds"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (each side's)")
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/async_rollout.json"))
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    results: dict[str, Any] = {"steps": args.steps, "threads": args.threads, "seed": args.seed, "arms": {}}
    with tempfile.TemporaryDirectory() as root:
        for name in ARMS:
            results["arms"][name] = run_arm(name, args, Path(root))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    sync, asynchronous = results["arms"]["sync"], results["arms"]["async"]
    print(f"\n{args.steps} steps, torch threads {args.threads}, timed after the first step")
    for name, arm in results["arms"].items():
        reward_at = [(round(end - arm["step_ends"][0], 1), round(r, 2)) for end, r in
                     zip(arm["step_ends"], arm["rewards"], strict=True)][:: max(1, args.steps // 6)]
        print(f"{name:>6}: {arm['steps_per_s']:.2f} steps/s, {arm['tokens_per_s']:.0f} tokens/s, "
              f"trainer waiting on rollout {sum(arm['waits'][1:]):.1f} s, rollout idle {sum(arm['idle'][1:]):.1f} s")
        print(f"        reward by wall-clock (s, reward): {reward_at}")
    print(f"async / sync: {asynchronous['steps_per_s'] / sync['steps_per_s']:.2f}x steps/s")
    print(f"raw numbers: {args.out}")


if __name__ == "__main__":
    main()
