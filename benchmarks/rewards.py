"""Reward scoring throughput: omni-rewards' manager vs verl's fastest shipped reward manager.

    uv run python benchmarks/rewards.py [--prompts 40] [--n 8] [--workers N]
        [--json outputs/benchmarks/rewards.json] [--reference-mmk12 PATH/mmk12_reward.py]

One mixed gsm8k / MMK12 corpus (seeded, written here): ``--prompts`` prompts, ``--n``
responses each, as a GRPO rollout batch has them. Scored two ways, on the same CPUs:

- verl ``prime``: the scoring core of verl's process-pool reward manager
  (``verl.workers.reward_manager.prime.run_reward_scoring``), with one process per worker
  instead of its hard-coded 64, and a new pool per batch as ``prime`` makes one. Its
  scorer: verl's ``gsm8k.compute_score``; for MMK12 the seeds' reference formula (the test
  oracle ``packages/omni-rewards/tests/omni_rewards_reference_oracle.py``) with verl's
  math-verify check called in-process (verl's own ``math_verify.compute_score`` adds a
  process-pool round trip per call, so this is verl's fastest possible path).
- omni-rewards: ``RewardManager.score_batch`` with warm workers (one per CPU by default).

Scores must be identical (asserted). ``--reference-mmk12`` also scores the MMK12 samples
with verl-omni's own ``mmk12_reward.py`` (sequentially; it needs verl-omni's import path or
nothing beyond verl) and reports how many agree: the documented difference is an option
text with a degree sign, which that file's code cannot credit (see ``omni_rewards.scorers.mmk12``).

Prints samples/s and, last, the ratio; writes the raw numbers as JSON. Not a CI gate.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ORACLE_PATH = ROOT / "packages" / "omni-rewards" / "tests" / "omni_rewards_reference_oracle.py"

Sample = tuple[str, str, str, dict[str, Any] | None]

REASONING = [
    "First, note that the two triangles share the angle at $B$, so they are similar. ",
    "Let $x$ be the unknown length. Then $\\frac{x}{4} = \\frac{6}{8}$, hence $x = 3$. ",
    "We compute $3 \\times 12 = 36$ and subtract the $9$ that were already used. ",
    "By the Pythagorean theorem, $a^2 + b^2 = c^2$ with $a = 3$ and $b = 4$. ",
    "Since $\\angle ABC = 30^\\circ$ and the angles of a triangle sum to $180^\\circ$, ",
    "Each box holds 12 eggs, and there are 7 boxes, giving 84 eggs in total. ",
]


def load_by_path(name: str, path: Path) -> ModuleType:
    """A module from a file, registered under ``name`` (worker processes unpickle by name)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def verl_reward_score_module(name: str) -> ModuleType:
    """``verl/utils/reward_score/<name>.py`` by path."""
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        raise SystemExit("verl is not installed: uv sync --extra distributed.")
    path = Path(spec.origin).parent / "utils" / "reward_score" / f"{name}.py"
    return load_by_path(f"verl_reference_{name}", path)


# --- the corpus ----------------------------------------------------------------------------


def reasoning(rng: random.Random) -> str:
    return "".join(rng.choice(REASONING) for _ in range(rng.randint(4, 12)))


def math_value(rng: random.Random) -> tuple[str, str]:
    """An MMK12-style answer and the same value written another way."""
    kind = rng.randrange(6)
    a, b = rng.randint(1, 60), rng.randint(2, 60)
    if kind == 0:
        return str(a * b - 500), str(a * b - 500)
    if kind == 1:
        return f"\\frac{{{a}}}{{{b}}}", f"\\frac{{{2 * a}}}{{{2 * b}}}"
    if kind == 2:
        return f"{a}\\sqrt{{{b}}}", f"\\sqrt{{{a * a * b}}}"
    if kind == 3:
        return f"{a + 10}^\\circ", f"{a + 10}°"
    if kind == 4:
        return f"x^2-{a * a}", f"(x-{a})(x+{a})"
    return f"\\frac{{\\pi}}{{{b}}}", f"\\pi/{b}"


def wrap(rng: random.Random, written: str) -> str:
    tail = rng.random()
    if tail < 0.7:
        answer = f"<answer>The final answer is \\boxed{{{written}}}.</answer>"
    elif tail < 0.85:
        answer = f"<answer>{written}</answer>"
    else:
        answer = f"So the answer is $\\boxed{{{written}}}$."
    return f"<think>{reasoning(rng)}</think>{answer}"


def gsm8k_group(rng: random.Random, n: int) -> list[Sample]:
    truth = str(rng.randint(1, 5000))
    group = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.7:
            answer = f"#### {int(truth):,}"
        elif kind < 0.9:
            answer = f"#### {int(truth) + rng.randint(1, 9)}"
        else:
            answer = f"The answer is {truth}."
        group.append(("openai/gsm8k", reasoning(rng) + answer, truth, None))
    return group


def mmk12_group(rng: random.Random, n: int) -> list[Sample]:
    """One prompt's responses: a few distinct final answers, as a policy gives them."""
    if rng.random() < 0.3:  # a choice question
        options = {letter: math_value(rng)[0] for letter in "ABCD"}
        truth = rng.choice("ABCD")
        written_forms = [truth, rng.choice("ABCD"), options[truth]]
        extra: dict[str, Any] | None = {"options": json.dumps(options)}
    else:
        truth, same = math_value(rng)
        written_forms = [truth, same, math_value(rng)[0]]
        extra = None
    weights = [0.6, 0.25, 0.15]
    return [
        ("mmk12", wrap(rng, rng.choices(written_forms, weights)[0]), truth, extra)
        for _ in range(n)
    ]


def build_corpus(prompts: int, n: int, seed: int) -> list[Sample]:
    rng = random.Random(seed)
    corpus: list[Sample] = []
    for i in range(prompts):
        corpus += gsm8k_group(rng, n) if i % 2 == 0 else mmk12_group(rng, n)
    return corpus


# --- verl's side ---------------------------------------------------------------------------

_VERL: dict[str, Any] = {}


def verl_setup() -> None:
    gsm8k = verl_reward_score_module("gsm8k")
    math_verify = verl_reward_score_module("math_verify")
    oracle = load_by_path("omni_rewards_reference_oracle", ORACLE_PATH)

    def verify(boxed_truth: str, prediction: str) -> float:
        try:
            return float(math_verify._verify_in_subprocess(boxed_truth, prediction))
        except Exception:
            return 0.0

    _VERL.update(gsm8k=gsm8k.compute_score, mmk12=oracle.mmk12_reference, verify=verify)


def verl_compute_score(
    data_source: str, solution: str, truth: str, extra_info: Mapping[str, Any] | None
) -> float:
    """prime's ``evaluation_func(task, completion, reference, extra_info)``; a number, as
    prime needs (it reads ``result[0]`` of anything else)."""
    if data_source == "openai/gsm8k":
        return float(_VERL["gsm8k"](solution, truth))
    return float(_VERL["mmk12"](solution, truth, extra_info, _VERL["verify"])["score"])


def clear_math_caches() -> None:
    """math-verify and sympy memoise parses; each contender meets the corpus cold, as a
    trainer meets new responses every step."""
    from math_verify.parser import parse_expr_cached, parse_latex_cached
    from sympy.core.cache import clear_cache

    for cached in (parse_latex_cached, parse_expr_cached):
        cached.cache_clear()
    clear_cache()


def throughput(label: str, count: int, seconds: float) -> float:
    rate = count / seconds
    print(f"  {label:<34} {seconds:8.2f} s   {rate:9.1f} samples/s")
    return rate


def reference_file_agreement(path: Path, corpus: list[Sample], ours: list[float]) -> dict[str, Any]:
    reference = load_by_path("verl_omni_mmk12_reward", path)
    agree = differ = 0
    examples = []
    for sample, score in zip(corpus, ours, strict=True):
        source, solution, truth, extra = sample
        if source != "mmk12":
            continue
        theirs = reference.compute_score(solution, truth, extra_info=extra)["score"]
        if theirs == score:
            agree += 1
        else:
            differ += 1
            examples.append((solution[-60:], truth, extra, score, theirs))
    print(f"  verl-omni mmk12_reward.py: agrees on {agree} of {agree + differ} MMK12 samples")
    for example in examples[:3]:
        print(f"    differs: {example}")
    return {"path": str(path), "agree": agree, "differ": differ}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--n", type=int, default=8, help="responses per prompt")
    parser.add_argument("--workers", type=int, default=None, help="default: one per CPU")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=ROOT / "outputs" / "benchmarks" / "rewards.json")
    parser.add_argument("--reference-mmk12", type=Path, default=None)
    args = parser.parse_args()

    from verl.workers.reward_manager.prime import run_reward_scoring

    from omni_rewards import RewardManager, RewardManagerConfig

    verl_setup()
    workers = args.workers or os.cpu_count() or 1
    corpus = build_corpus(args.prompts, args.n, args.seed)
    warm_up = build_corpus(8, args.n, args.seed + 1)
    columns = [list(column) for column in zip(*corpus, strict=True)]
    print(f"{len(corpus)} samples ({args.prompts} prompts x {args.n}; gsm8k/MMK12 half each), "
          f"{os.cpu_count()} CPUs, {workers} workers")

    # verl prime, warmed once on another corpus (first-call import costs), then cold caches.
    sources, solutions, truths, extras = (list(c) for c in zip(*warm_up, strict=True))
    run_reward_scoring(verl_compute_score, solutions, truths, sources, extras, workers)
    clear_math_caches()
    start = time.perf_counter()
    verl_scores = run_reward_scoring(
        verl_compute_score, columns[1], columns[2], columns[0], columns[3], workers
    )
    verl_seconds = time.perf_counter() - start
    verl_rate = throughput("verl prime (process pool)", len(corpus), verl_seconds)

    config = RewardManagerConfig(num_workers=workers, timeout_s=30.0)
    with RewardManager(config) as manager:
        start = time.perf_counter()
        manager.start()
        manager.score_batch(*(list(column) for column in zip(*warm_up, strict=True)))
        startup = time.perf_counter() - start
        start = time.perf_counter()
        result = manager.score_batch(*columns)
        ours_seconds = time.perf_counter() - start
    ours_rate = throughput(f"omni-rewards manager ({workers} w)", len(corpus), ours_seconds)
    print(f"  (omni-rewards worker start-up and warm-up, once per run: {startup:.2f} s)")

    if verl_scores != result.scores:
        differing = [
            (i, corpus[i][1][-80:], corpus[i][2], verl_scores[i], result.scores[i])
            for i in range(len(corpus))
            if verl_scores[i] != result.scores[i]
        ]
        raise SystemExit(f"scores differ on {len(differing)} samples, e.g. {differing[:3]}")
    failures = result.metrics["reward/timeouts"] + result.metrics["reward/errors"]
    print(f"identical scores on all {len(corpus)} samples; {failures:g} timeouts/errors")

    record: dict[str, Any] = {
        "samples": len(corpus),
        "prompts": args.prompts,
        "n": args.n,
        "seed": args.seed,
        "cpus": os.cpu_count(),
        "workers": workers,
        "verl_prime": {"seconds": verl_seconds, "samples_per_s": verl_rate},
        "omni_rewards_manager": {
            "seconds": ours_seconds,
            "samples_per_s": ours_rate,
            "startup_seconds": startup,
        },
        "identical_scores": True,
        "manager_over_verl_prime": ours_rate / verl_rate,
    }
    if args.reference_mmk12 is not None:
        record["reference_mmk12_file"] = reference_file_agreement(
            args.reference_mmk12, corpus, result.scores
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=2) + "\n")
    print(f"raw numbers: {args.json}")
    print(f"omni-rewards manager / verl prime: {ours_rate / verl_rate:5.2f}x")


if __name__ == "__main__":
    main()
