"""The local rollout engine vs a plain transformers loop, on the tiny Qwen3-Omni thinker.

    uv run python benchmarks/rollout.py [--prompts 8] [--n 8] [--new-tokens 32]

The peer is what a trainer typically writes: ``generate`` with ``num_return_sequences``, then
a second forward pass over prompt + response to get the sampled tokens' log-probs (TRL's
GRPO trainer recomputes them this way). Ours reads them from the sampling scores. Prints
generated tokens/s of each and the ratio. Not a CI gate.
"""

from __future__ import annotations

import argparse
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer, Qwen3OmniMoeForConditionalGeneration

    from omni_qwen3.tiny import build_tiny_qwen3_omni
    from omni_rollout.local_engine import LocalEngine
    from omni_rollout.sampling import SamplingSettings

    path = build_tiny_qwen3_omni(tempfile.mkdtemp() + "/tiny")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(path).eval()
    thinker = model.thinker
    texts = [f"<|im_start|>user\nWhat is {i} + {i + 1}?<|im_end|>\n<|im_start|>assistant\n" for i in range(args.prompts)]
    prompts = [dict(tokenizer(text, return_tensors="pt")) for text in texts]
    pad = tokenizer.pad_token_id
    # No stop token: every sample generates exactly new_tokens, so both sides do equal work.
    sampling = SamplingSettings(n=args.n, max_new_tokens=args.new_tokens, seed=0)

    def ours() -> int:
        engine = LocalEngine(thinker, eos_token_ids=(), pad_token_id=pad)
        rollouts = engine.generate(prompts, sampling)
        return sum(len(o.token_ids) for r in rollouts for o in r.outputs)

    def peer() -> int:
        total = 0
        torch.manual_seed(0)
        for prompt in prompts:
            with torch.no_grad():
                out = thinker.generate(
                    **prompt, do_sample=True, num_return_sequences=args.n, max_new_tokens=args.new_tokens,
                    min_new_tokens=args.new_tokens, top_k=0, pad_token_id=pad,
                )
                length = prompt["input_ids"].shape[1]
                logits = thinker(input_ids=out, attention_mask=torch.ones_like(out)).logits[:, length - 1 : -1]
                torch.log_softmax(logits.float(), -1).gather(-1, out[:, length:, None])
            total += int(out[:, length:].numel())
        return total

    ours()  # warm-up
    results = {}
    for name, fn in (("omni-rl LocalEngine", ours), ("transformers generate + log-prob pass", peer)):
        start = time.perf_counter()
        tokens = fn()
        results[name] = tokens / (time.perf_counter() - start)
        print(f"{name:<40}{results[name]:>10.0f} tokens/s  ({tokens} tokens)")
    ratio = results["omni-rl LocalEngine"] / results["transformers generate + log-prob pass"]
    print(f"ratio ours/peer: {ratio:.2f}x  ({args.prompts} prompts x n={args.n}, {args.new_tokens} new tokens, torch threads {torch.get_num_threads()})")


if __name__ == "__main__":
    main()
