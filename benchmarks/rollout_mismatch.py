"""Rollout correction against an injected rollout/actor mismatch, on the embedded default.

The local engine normally samples with the actor's own weights, so its rollout and actor
agree to float noise. Here the rollout samples hotter than the actor scores: every training
rollout runs at ``--rollout-temperature`` times the configured temperature and reports its
log-probs under that distribution, as a rollout with other kernels, precision or stale
weights reports its own, while the actor keeps temperature 1. Three arms, one process, the
same seed, config and steps:

- ``matched``: no injection (the reference curve);
- ``mismatched``: the hot rollout, no correction;
- ``mismatched+tis``: the hot rollout, token-level truncated IS
  (``algorithm.rollout_correction.rollout_is=token rollout_is_threshold=2.0``).

``--mismatch bf16`` injects the precision gap: the training rollout samples with a bf16 copy
of the policy (its weights refreshed from the actor's before every call, bf16 kernels, bf16
log-probs) while the actor scores in fp32, as a bf16 vLLM rollout does against an FSDP actor
(arms ``matched``, ``bf16``, ``bf16+tis``).

``--mismatch stale`` injects the other common gap, a stale policy: REINFORCE on the rollout's
log-probs (bypass mode, ``loss_type=reinforce``), synchronous (``matched``), on samples up to
two policy versions old (``stale``: ``async_training.max_staleness=2``), and the same with
token TIS (``stale+tis``).

Learning is read from validation, which samples at the actor's own temperature (with the
task's own engine, not the injected one): ``val-core/.../score/mean@4`` every ``--val-every`` steps. The
training reward is of the hot samples, so it is printed but not compared. Raw numbers go to
``outputs/benchmarks/rollout_mismatch.json``.

    uv run python benchmarks/rollout_mismatch.py [--steps 40] [--rollout-temperature 1.5] [--seeds 1 2 3]
    uv run python benchmarks/rollout_mismatch.py --mismatch stale --out outputs/benchmarks/rollout_mismatch_stale.json
    uv run python benchmarks/rollout_mismatch.py --mismatch bf16 --out outputs/benchmarks/rollout_mismatch_bf16.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

TIS = ["algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=2.0"]
ARMS: dict[str, tuple[bool, list[str]]] = {
    "matched": (False, []),
    "mismatched": (True, []),
    "mismatched+tis": (True, TIS),
}
REINFORCE = ["algorithm.rollout_correction.bypass_mode=true", "algorithm.rollout_correction.loss_type=reinforce"]
STALE_ARMS: dict[str, tuple[bool, list[str]]] = {
    "matched": (False, REINFORCE),
    "stale": (False, [*REINFORCE, "async_training.max_staleness=2"]),
    "stale+tis": (False, [*REINFORCE, "async_training.max_staleness=2", *TIS]),
}
"""``--mismatch stale``: REINFORCE on the rollout's log-probs (bypass mode), synchronous or on
samples up to two policy versions old (``async_training``); uncorrected, the stale samples'
gradient is the old policy's, and token TIS reweights it toward the current one."""
BF16_ARMS: dict[str, tuple[bool, list[str]]] = {
    "matched": (False, []),
    "bf16": (True, []),
    "bf16+tis": (True, TIS),
}
"""``--mismatch bf16``: the rollout samples with a bf16 copy of the fp32 policy."""
VAL_KEY = "val-core/omni_rl/builtin_digits/score/mean@4"


class HotEngine:
    """The local engine sampling at ``factor`` times the temperature it is asked for (its
    log-probs are of that hotter distribution); everything else is the engine's."""

    def __init__(self, engine: Any, factor: float) -> None:
        self.engine = engine
        self.factor = factor

    def generate(self, prompts: Any, sampling: Any) -> Any:
        return self.engine.generate(prompts, dataclasses.replace(sampling, temperature=sampling.temperature * self.factor))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


class Bf16Engine:
    """A local engine over a bf16 copy of the policy, its weights refreshed from the actor's
    before every ``generate`` (rounded to bf16); everything else is the actor's engine's."""

    def __init__(self, engine: Any, bf16_engine: Any, policy: Any, copy: Any) -> None:
        self.engine = engine
        self.bf16_engine = bf16_engine
        self.pairs = list(zip(policy.parameters(), copy.parameters(), strict=True))

    def generate(self, prompts: Any, sampling: Any) -> Any:
        import torch

        with torch.no_grad():
            for source, target in self.pairs:
                target.copy_(source)
        return self.bf16_engine.generate(prompts, sampling)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def bf16_engine(trainer: Any, engine: Any) -> Bf16Engine:
    """The training sampler's engine on a bf16 copy of ``trainer``'s policy."""
    import torch

    from omni_trainer.engines.local.async_rollout import policy_copy

    copy = policy_copy(trainer.actor.model).to(torch.bfloat16)
    return Bf16Engine(engine, trainer.run.text_engine(trainer.actor, trainer.run.mode, model=copy),
                      trainer.actor.model, copy)


def run_arm(name: str, hot: bool, overrides: list[str], args: argparse.Namespace, root: Path, seed: int) -> dict[str, Any]:
    from omni_trainer.config import load_config
    from omni_trainer.engines.local.trainer import LocalTrainer
    from omni_trainer.resolved import resolve_run

    trainer = LocalTrainer(resolve_run(load_config([
        f"trainer.total_training_steps={args.steps}", "trainer.test_freq=0", "trainer.save_freq=0",
        f"trainer.default_local_dir={root / name.replace('+', '-')}-{seed}", f"trainer.seed={seed}", *overrides,
    ])))
    trainer.setup()
    if hot:  # the training sampler's engine only: validation samples with the task's own engine
        sampler = trainer.task.sampler  # type: ignore[attr-defined]
        sampler.engine = (bf16_engine(trainer, sampler.engine) if args.mismatch == "bf16"
                          else HotEngine(sampler.engine, args.rollout_temperature))
    curve: dict[str, Any] = {"steps": [], "reward": [], "val_steps": [], "val_score": [], "kl": [], "is_mean": []}
    started = time.perf_counter()
    trainer.task.start()
    try:
        trainer.task.prefetch(trainer.prompts_of, 1, trainer.total_steps)  # async arms: the thread starts
        curve["val_steps"].append(0)
        curve["val_score"].append(trainer.validate(0)[VAL_KEY])
        for step, batch in trainer.batches(0):
            metrics = trainer.train_step(step, batch)
            curve["steps"].append(step)
            curve["reward"].append(metrics["critic/score/mean"])
            curve["kl"].append(metrics.get("rollout_corr/kl"))
            curve["is_mean"].append(metrics.get("rollout_corr/rollout_is_mean"))
            if step % args.val_every == 0:
                curve["val_steps"].append(step)
                curve["val_score"].append(trainer.validate(step)[VAL_KEY])
                print(f"{name:>15} seed {seed} step {step:3d}: val {curve['val_score'][-1]:.3f}  "
                      f"train reward {sum(curve['reward'][-args.val_every:]) / args.val_every:.3f}  "
                      f"rollout_corr/kl {metrics.get('rollout_corr/kl', float('nan')):+.4f}", flush=True)
    finally:
        trainer.task.close()
    curve["seconds"] = time.perf_counter() - started
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--val-every", type=int, default=10)
    parser.add_argument("--rollout-temperature", type=float, default=1.5,
                        help="the training rollout's temperature, as a multiple of the actor's")
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/rollout_mismatch.json"))
    parser.add_argument("--mismatch", choices=("temperature", "stale", "bf16"), default="temperature")
    parser.add_argument("--arms", nargs="*", default=None, choices=sorted({*ARMS, *STALE_ARMS, *BF16_ARMS}))
    parser.add_argument("--seeds", type=int, nargs="*", default=[1, 2, 3])
    args = parser.parse_args()
    import tempfile

    import torch

    torch.set_num_threads(1)
    arms = {"temperature": ARMS, "stale": STALE_ARMS, "bf16": BF16_ARMS}[args.mismatch]
    args.arms = args.arms or list(arms)
    results: dict[str, Any] = {
        "mismatch": args.mismatch, "rollout_temperature": args.rollout_temperature, "steps": args.steps, "seeds": args.seeds,
        "arms": {name: {} for name in args.arms},
    }
    with tempfile.TemporaryDirectory() as root:
        for seed in args.seeds:
            for name in args.arms:
                hot, overrides = arms[name]
                results["arms"][name][seed] = run_arm(name, hot, overrides, args, Path(root), seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    gap = {"temperature": f"rollout at {args.rollout_temperature}x the actor's temperature",
           "stale": "samples up to 2 policy versions old, REINFORCE in bypass mode",
           "bf16": "rollout with a bf16 copy of the fp32 policy"}[args.mismatch]
    print(f"\nvalidation score (mean@4) by step; {gap}")
    steps = results["arms"][args.arms[0]][args.seeds[0]]["val_steps"]
    print(f"{'arm':>15} {'seed':>5} " + " ".join(f"{s:>6d}" for s in steps) + "   mean rollout_corr/kl")
    for name, by_seed in results["arms"].items():
        for seed, curve in by_seed.items():
            kls = [k for k in curve["kl"] if k is not None]
            print(f"{name:>15} {seed:>5} " + " ".join(f"{v:6.3f}" for v in curve["val_score"])
                  + f"   {sum(kls) / max(len(kls), 1):+.4f}")
        means = [sum(c["val_score"][i] for c in by_seed.values()) / len(by_seed) for i in range(len(steps))]
        print(f"{name:>15} {'mean':>5} " + " ".join(f"{v:6.3f}" for v in means))
    print(f"raw numbers: {args.out}")


if __name__ == "__main__":
    main()
