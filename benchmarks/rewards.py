"""Reward scoring throughput: omni-rewards' manager vs verl's sequential scoring.

    uv run --extra distributed python benchmarks/rewards.py [--samples 600] [--workers N]

One mixed gsm8k/MMK12 corpus (seeded, written here), scored three ways in one run:

- verl, sequential: what verl's naive reward manager does, one sample after another in the
  driver process. gsm8k by verl's ``gsm8k.compute_score``; MMK12 (verl ships no MMK12
  scorer) by the same composite formula with verl's math-verify check
  (``math_verify._verify_in_subprocess``) for every math comparison. That check is called
  in-process: verl's own ``compute_score`` adds a process-pool round trip per call, so this
  baseline is, if anything, faster than verl.
- omni-rewards, sequential: ``omni_rewards.compute_score`` in a loop (the scorers alone).
- omni-rewards, manager: ``RewardManager.score_batch`` with warm workers (one per CPU).

Scores must be identical across the three (asserted). Prints samples/s and the ratios.
Not a CI gate.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from math_verify.parser import parse_expr_cached, parse_latex_cached
from sympy.core.cache import clear_cache as clear_sympy_cache

from omni_rewards import RewardManager, RewardManagerConfig, compute_score
from omni_rewards.scorers.mmk12 import DEFAULT_FORMAT_WEIGHT, choice_accuracy, format_reward
from omni_rewards.scorers.options import read_options
from omni_rewards.text import answer_payloads, normalise_angles

Sample = tuple[str, str, str, dict[str, Any] | None]

REASONING = [
    "First, note that the two triangles share the angle at $B$, so they are similar. ",
    "Let $x$ be the unknown length. Then $\\frac{x}{4} = \\frac{6}{8}$, hence $x = 3$. ",
    "We compute $3 \\times 12 = 36$ and subtract the $9$ that were already used. ",
    "By the Pythagorean theorem, $a^2 + b^2 = c^2$ with $a = 3$ and $b = 4$. ",
    "Since $\\angle ABC = 30^\\circ$ and the angles of a triangle sum to $180^\\circ$, ",
    "Each box holds 12 eggs, and there are 7 boxes, giving 84 eggs in total. ",
]


def load_verl_module(name: str) -> ModuleType:
    """``verl/utils/reward_score/<name>.py`` by path: importing ``verl`` pulls in torch."""
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        raise SystemExit("verl is not installed: run with `uv run --extra distributed ...`.")
    path = Path(spec.origin).parent / "utils" / "reward_score" / f"{name}.py"
    module_spec = importlib.util.spec_from_file_location(f"verl_reference_{name}", path)
    if module_spec is None or module_spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def reasoning(rng: random.Random) -> str:
    return "".join(rng.choice(REASONING) for _ in range(rng.randint(4, 12)))


def gsm8k_sample(rng: random.Random) -> Sample:
    truth = str(rng.randint(1, 5000))
    kind = rng.random()
    if kind < 0.7:
        answer = f"#### {int(truth):,}"
    elif kind < 0.9:
        answer = f"#### {int(truth) + rng.randint(1, 9)}"
    else:
        answer = f"The answer is {truth}."
    return ("openai/gsm8k", reasoning(rng) + answer, truth, None)


def math_value(rng: random.Random) -> tuple[str, str]:
    """A random MMK12-style answer and the same value written another way."""
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


def mmk12_sample(rng: random.Random) -> Sample:
    kind = rng.random()
    if kind < 0.3:  # a choice question
        options = {letter: math_value(rng)[0] for letter in "ABCD"}
        truth = rng.choice("ABCD")
        written = rng.choice([truth, rng.choice("ABCD"), options[truth]])
        extra: dict[str, Any] | None = {"options": json.dumps(options)}
    else:
        truth, same = math_value(rng)
        written = rng.choice([truth, truth, same, math_value(rng)[0]])
        extra = None
    wrapper = rng.random()
    if wrapper < 0.75:
        tail = f"<answer>The final answer is \\boxed{{{written}}}.</answer>"
    elif wrapper < 0.9:
        tail = f"<answer>{written}</answer>"
    else:
        tail = f"So the answer is $\\boxed{{{written}}}$."
    return ("mmk12", f"<think>{reasoning(rng)}</think>{tail}", truth, extra)


def build_corpus(size: int, seed: int) -> list[Sample]:
    rng = random.Random(seed)
    return [gsm8k_sample(rng) if i % 2 == 0 else mmk12_sample(rng) for i in range(size)]


def verl_sequential_scorer() -> Callable[[Sample], float]:
    gsm8k = load_verl_module("gsm8k")
    math_verify = load_verl_module("math_verify")

    def verl_equivalent(prediction: str, truth: str) -> bool:
        try:
            return bool(math_verify._verify_in_subprocess("\\boxed{" + truth + "}", prediction))
        except Exception:
            return False

    def mmk12(solution: str, truth: str, extra: Mapping[str, Any] | None) -> float:
        payloads = answer_payloads(solution)
        answer = payloads[-1] if payloads else solution
        truth = truth.strip()
        if len(truth) == 1 and truth in "ABCDE":
            accuracy = choice_accuracy(answer, truth, read_options(extra), verl_equivalent)
        else:
            accuracy = float(verl_equivalent(normalise_angles(answer), normalise_angles(truth)))
        weight = DEFAULT_FORMAT_WEIGHT
        return (accuracy + weight * format_reward(solution)) / (1.0 + weight)

    def score(sample: Sample) -> float:
        source, solution, truth, extra = sample
        if source == "openai/gsm8k":
            return float(gsm8k.compute_score(solution, truth))
        return mmk12(solution, truth, extra)

    return score


def clear_math_caches() -> None:
    """math-verify memoises parses and sympy memoises expressions; each contender must meet
    the corpus fresh, as a trainer meets new responses every step (the manager's workers
    never saw it)."""
    for cached in (parse_latex_cached, parse_expr_cached):
        cached.cache_clear()
    clear_sympy_cache()


def throughput(label: str, count: int, seconds: float) -> float:
    rate = count / seconds
    print(f"  {label:<28} {seconds:8.2f} s   {rate:9.1f} samples/s")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=600)
    parser.add_argument("--workers", type=int, default=None, help="default: one per CPU")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    corpus = build_corpus(args.samples, args.seed)
    warm_up = build_corpus(60, args.seed + 1)
    columns = [list(column) for column in zip(*corpus, strict=True)]
    verl_score = verl_sequential_scorer()
    for sample in warm_up:  # lazy imports and first-call costs, on a different corpus
        verl_score(sample)
        compute_score(*sample)

    print(f"{len(corpus)} samples (gsm8k/MMK12 half each), {os.cpu_count()} CPUs")
    clear_math_caches()
    start = time.perf_counter()
    verl_scores = [verl_score(sample) for sample in corpus]
    verl_rate = throughput("verl, sequential", len(corpus), time.perf_counter() - start)

    clear_math_caches()
    start = time.perf_counter()
    sequential_scores = [compute_score(*sample)["score"] for sample in corpus]
    seconds = time.perf_counter() - start
    sequential_rate = throughput("omni-rewards, sequential", len(corpus), seconds)

    config = RewardManagerConfig(num_workers=args.workers, timeout_s=30.0)
    with RewardManager(config) as manager:
        start = time.perf_counter()
        manager.start()
        manager.score_batch(*(list(column) for column in zip(*warm_up, strict=True)))
        startup = time.perf_counter() - start
        start = time.perf_counter()
        result = manager.score_batch(*columns)
        seconds = time.perf_counter() - start
        label = f"omni-rewards, manager ({config.workers()} w)"
        manager_rate = throughput(label, len(corpus), seconds)
    print(f"  (worker start-up and warm-up, once per run: {startup:.2f} s)")

    if not (verl_scores == sequential_scores == result.scores):
        differing = [
            (i, corpus[i][1][-80:], corpus[i][2], verl_scores[i], sequential_scores[i])
            for i in range(len(corpus))
            if not verl_scores[i] == sequential_scores[i] == result.scores[i]
        ]
        raise SystemExit(f"scores differ on {len(differing)} samples, e.g. {differing[:3]}")
    failures = result.metrics["reward/timeouts"] + result.metrics["reward/errors"]
    print(f"identical scores on all {len(corpus)} samples; {failures:g} timeouts/errors")
    print(f"manager / verl sequential:        {manager_rate / verl_rate:5.2f}x")
    print(f"omni sequential / verl sequential: {sequential_rate / verl_rate:5.2f}x")


if __name__ == "__main__":
    main()
