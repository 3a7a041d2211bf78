"""Our policy losses and advantage estimators vs verl's ``core_algos`` on the same tensors.

    uv run python benchmarks/losses.py [--batch 512] [--length 1024] [--repeats 5]

Prints the time of each side (best of ``repeats``) and the ratio verl / ours, after
asserting that both give the same values (and gradients, for losses); the ratios again on
the last line. The raw numbers go to ``outputs/benchmarks/losses.json`` (``--out``). Not a
CI gate.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch


def best_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/losses.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    pieces: list[dict[str, object]] = []

    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import core_algos
    from verl.workers.config.actor import ActorConfig

    from omni_training.advantages import AdvantageConfig, get_advantage_estimator
    from omni_training.policy_loss import PolicyLossConfig, get_policy_loss

    g = torch.Generator().manual_seed(0)
    b, t = args.batch, args.length
    old = torch.randn(b, t, generator=g) * 0.3 - 1
    new = old + torch.randn(b, t, generator=g) * 0.05
    lengths = torch.randint(t // 8, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None] < lengths[:, None]).float()
    rewards = torch.zeros(b, t)
    rewards[torch.arange(b), lengths - 1] = torch.randint(0, 2, (b,), generator=g).float()
    index = np.array([i // args.group for i in range(b)])
    print(f"batch {b} x {t} tokens, groups of {args.group}, best of {args.repeats}, torch threads {torch.get_num_threads()}")
    print(f"{'piece':<34}{'ours (ms)':>11}{'verl (ms)':>11}{'verl/ours':>11}")

    for name in ("grpo", "rloo", "reinforce_plus_plus_baseline"):
        ours_fn = get_advantage_estimator(name)
        verl_fn = core_algos.get_adv_estimator_fn(name)
        ours = ours_fn(token_level_rewards=rewards, response_mask=mask, index=list(index), config=AdvantageConfig())
        theirs, _ = verl_fn(token_level_rewards=rewards.clone(), response_mask=mask, index=index, config=AlgoConfig())
        torch.testing.assert_close(ours.advantages, theirs, rtol=1e-5, atol=1e-5)
        t_ours = best_time(lambda: ours_fn(token_level_rewards=rewards, response_mask=mask, index=list(index), config=AdvantageConfig()), args.repeats)
        t_verl = best_time(lambda: verl_fn(token_level_rewards=rewards.clone(), response_mask=mask, index=index, config=AlgoConfig()), args.repeats)
        print(f"{'adv ' + name:<34}{t_ours * 1e3:>11.2f}{t_verl * 1e3:>11.2f}{t_verl / t_ours:>10.1f}x")
        pieces.append({"piece": f"adv {name}", "ours_ms": t_ours * 1e3, "verl_ms": t_verl * 1e3})

    advantages = get_advantage_estimator("grpo")(
        token_level_rewards=rewards, response_mask=mask, index=list(index), config=AdvantageConfig()
    ).advantages
    for mode, agg in (("vanilla", "token-mean"), ("gspo", "seq-mean-token-mean"), ("cispo", "token-mean")):
        config = PolicyLossConfig(loss_agg_mode=agg, clip_ratio_low=0.2, clip_ratio_high=0.28)
        verl_config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1,
                                  loss_agg_mode=agg, clip_ratio_low=0.2, clip_ratio_high=0.28)
        ours_fn, verl_fn = get_policy_loss(mode), core_algos.get_policy_loss_fn(mode)

        def run_ours() -> torch.Tensor:
            lp = new.clone().requires_grad_(True)
            ours_fn(old_log_prob=old, log_prob=lp, advantages=advantages, response_mask=mask, config=config).loss.backward()
            return lp.grad  # type: ignore[return-value]

        def run_verl() -> torch.Tensor:
            lp = new.clone().requires_grad_(True)
            loss, _ = verl_fn(old_log_prob=old, log_prob=lp, advantages=advantages, response_mask=mask,
                              loss_agg_mode=agg, config=verl_config)
            loss.backward()
            return lp.grad  # type: ignore[return-value]

        torch.testing.assert_close(run_ours(), run_verl(), rtol=1e-5, atol=1e-7)
        t_ours, t_verl = best_time(run_ours, args.repeats), best_time(run_verl, args.repeats)
        print(f"{'loss ' + mode + ' fwd+bwd':<34}{t_ours * 1e3:>11.2f}{t_verl * 1e3:>11.2f}{t_verl / t_ours:>10.1f}x")
        pieces.append({"piece": f"loss {mode} fwd+bwd", "ours_ms": t_ours * 1e3, "verl_ms": t_verl * 1e3})

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "losses", "batch": b, "length": t, "group": args.group, "repeats": args.repeats,
        "torch_threads": torch.get_num_threads(), "pieces": pieces, "load_average_before": load_before,
        "load_average_after": os.getloadavg(), "cpus": os.cpu_count(), "machine": platform.platform(),
        "versions": {p: version(p) for p in ("torch", "verl")},
    }, indent=1))
    print(f"raw numbers: {args.out}")
    print("ratio verl/ours: " + ", ".join(f"{p['piece']} {float(p['verl_ms']) / float(p['ours_ms']):.1f}x" for p in pieces))


if __name__ == "__main__":
    main()
