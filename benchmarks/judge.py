"""Judged scoring throughput on the CPU: the local engine's judge endpoint vs transformers' generate.

    uv run python benchmarks/judge.py [--samples 128] [--clients 16] [--max-num-seqs 16]
        [--json outputs/benchmarks/judge.json]

The built-in task's judge (``trainer tiny-judge``) scores the same ``--samples`` answers (drawn
as its training draws them) three ways, each greedy with the same 16-token budget, after the
same warm-up round, on one torch thread, timed by the same clock over the whole batch:

- ours: :class:`omni_rollout.chat_server.ChatServer` with ``--max-num-seqs``, asked over HTTP by
  ``--clients`` processes (as reward workers ask it), each request through
  ``omni_rewards.judge.judge_score`` (the request, the JSON score read back);
- peer, one by one: a ``generate`` call per answer (what a reward function that loads the
  judge itself does);
- peer, batched: left-padded ``generate`` calls of ``--max-num-seqs`` answers (the fastest a
  hand-written loop gets; it needs every answer up front, which a reward worker scoring one
  sample does not have).

Every side's answers are asserted equal (each side's scores are the same numbers). Prints
samples/s and, last, the ratios; writes the raw numbers as JSON. Not a CI gate.
"""

from __future__ import annotations

import argparse
import json
import random
import multiprocessing
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MAX_TOKENS = 16


def answers(count: int, seed: int = 1) -> list[str]:
    """``count`` rubric messages about answers like the tiny policy's (as the judge was taught)."""
    from omni_trainer.builtin_files import judge_examples

    example, rng = judge_examples(), random.Random(seed)
    return [example(rng)[0] for _ in range(count)]


def peer_generate(model: Any, tokenizer: Any, messages: list[str], batch: int) -> list[str]:
    """Greedy answers from ``generate`` on left-padded batches of ``batch`` messages."""
    import torch

    tokenizer.padding_side = "left"
    out = []
    for start in range(0, len(messages), batch):
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": m}], add_generation_prompt=True,
                                               tokenize=False) for m in messages[start:start + batch]]
        inputs = tokenizer(texts, padding=True, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            generated = model.generate(**inputs, max_new_tokens=MAX_TOKENS, do_sample=False,
                                       pad_token_id=tokenizer.pad_token_id)
        for row in generated[:, inputs["input_ids"].shape[1]:].tolist():
            if tokenizer.eos_token_id in row:
                row = row[:row.index(tokenizer.eos_token_id)]
            out.append(tokenizer.decode(row, skip_special_tokens=True))
    return out


def ask(address: str, message: str) -> str:
    """One judged answer over HTTP (what a reward worker's function does)."""
    from omni_rewards.judge import chat_completion, judge_messages

    return chat_completion(address, judge_messages(message), max_tokens=MAX_TOKENS)


def timed(run: Any) -> tuple[float, Any]:
    run()  # warm-up round, the same work
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--json", type=Path, default=ROOT / "outputs" / "benchmarks" / "judge.json")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from omni_rollout.chat_server import ChatServer, ChatServerSettings
    from omni_trainer.builtin_files import builtin_judge

    torch.set_num_threads(1)
    judge = str(builtin_judge())
    messages = answers(args.samples)
    tokenizer = AutoTokenizer.from_pretrained(judge)
    model = AutoModelForCausalLM.from_pretrained(judge, dtype=torch.float32).eval()

    one_by_one_s, one_by_one = timed(lambda: peer_generate(model, tokenizer, messages, 1))
    batched_s, batched = timed(lambda: peer_generate(model, tokenizer, messages, args.max_num_seqs))
    settings = ChatServerSettings(judge, response_length=MAX_TOKENS, max_num_seqs=args.max_num_seqs)
    context = multiprocessing.get_context("forkserver")
    with ChatServer(settings) as server, context.Pool(args.clients) as clients:
        asks = [(server.address, message) for message in messages]
        ours_s, ours = timed(lambda: clients.starmap(ask, asks, chunksize=1))
        mean_batch = server.served / server.batches
    assert ours == one_by_one == batched, "the three sides answered differently"
    results = {
        "samples": args.samples, "clients": args.clients, "max_num_seqs": args.max_num_seqs, "torch_threads": 1,
        "ours_endpoint_s": ours_s, "peer_one_by_one_s": one_by_one_s, "peer_batched_s": batched_s,
        "ours_samples_per_s": args.samples / ours_s, "peer_one_by_one_samples_per_s": args.samples / one_by_one_s,
        "peer_batched_samples_per_s": args.samples / batched_s, "ours_mean_batch": mean_batch,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"ours (endpoint, {args.clients} clients): {results['ours_samples_per_s']:.1f} samples/s, "
          f"{mean_batch:.1f} answers a generate")
    print(f"peer (generate one by one):  {results['peer_one_by_one_samples_per_s']:.1f} samples/s")
    print(f"peer (generate, batches of {args.max_num_seqs}): {results['peer_batched_samples_per_s']:.1f} samples/s")
    print(f"ratio ours / one by one: {one_by_one_s / ours_s:.2f}x; ours / batched: {batched_s / ours_s:.2f}x")


if __name__ == "__main__":
    main()
