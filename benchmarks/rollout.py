"""The local rollout engine vs a plain transformers loop, on the tiny Qwen3-Omni thinker.

    uv run python benchmarks/rollout.py [--modality text|image+audio] [--prompts 8] [--n 8] [--new-tokens 32]

The peer is what a trainer typically writes (TRL's GRPOTrainer does this on its non-vLLM
path): each prompt repeated ``n`` times, all rows left-padded into one batch by the
processor, one ``generate`` call, then one forward pass over prompt + response (media
included) for the sampled tokens' log-probs. Ours batches the same way (one left-padded
``generate`` over prompts x n rows) and reads the log-probs from the sampling scores.

Both sides get their prompts already processed (outside the clock), suppress the same ids
(media placeholders and the end-of-turn token, so every sample is exactly ``--new-tokens``
long and the token counts are equal, which is asserted), run one warm-up call each, then
``--repeats`` timed calls each, alternating. ``--modality text`` uses the built-in task's
questions alone; ``image+audio`` the built-in task's rows (a picture and a tone each).
Prints generated tokens/s of each side, then the ratio (last); writes the raw numbers to
``outputs/benchmarks/rollout-<modality>.json``. Not a CI gate.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modality", choices=("text", "image+audio"), default="text")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per side, after one warm-up each")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (see benchmarks/trainer.py)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch
    import transformers
    from transformers import AutoConfig, Qwen3OmniMoeThinkerForConditionalGeneration

    from omni_qwen3.tiny import build_tiny_qwen3_omni
    from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter
    from omni_rollout.local_engine import LocalEngine
    from omni_rollout.sampling import SamplingSettings
    from omni_trainer.builtin_task import builtin_rows
    from omni_trainer.placeholders import placeholder_token_ids

    torch.set_num_threads(args.threads)
    path = str(build_tiny_qwen3_omni())
    processor = Qwen3OmniThinkerAdapter().configure_processor(path, AutoConfig.from_pretrained(path))
    tokenizer = processor.tokenizer
    transformers.logging.set_verbosity_error()  # the talker and code2wav weights are not loaded (as intended)
    thinker = Qwen3OmniMoeThinkerForConditionalGeneration.from_pretrained(path).eval()
    multimodal = args.modality == "image+audio"
    rows = builtin_rows(args.prompts, seed=0)
    texts, images, audios = [], [], []
    for row in rows:
        content = row["messages"][0]["content"]
        if not multimodal:
            content = [part for part in content if part["type"] == "text"]
        messages = [{"role": "user", "content": content}]
        texts.append(processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
        images.append(row["images"][0])
        audios.append(row["audios"][0])

    def media(i: int) -> dict[str, Any]:
        return {"images": [images[i]], "audio": [audios[i]]} if multimodal else {}

    prompts = [dict(processor(text=[texts[i]], return_tensors="pt", **media(i))) for i in range(len(rows))]
    repeated = [i for i in range(len(rows)) for _ in range(args.n)]  # prompt k's rows k*n .. k*n+n-1
    batch_media = {"images": [images[i] for i in repeated], "audio": [audios[i] for i in repeated]} if multimodal else {}
    peer_inputs = dict(processor(
        text=[texts[i] for i in repeated], padding=True, padding_side="left", return_tensors="pt", **batch_media,
    ))
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    suppress = (*placeholder_token_ids(tokenizer, processor), eos)
    pad = tokenizer.pad_token_id
    sampling = SamplingSettings(n=args.n, max_new_tokens=args.new_tokens, seed=0)
    engine = LocalEngine(thinker, eos_token_ids=(eos,), pad_token_id=pad, suppress_token_ids=suppress)

    def ours() -> int:
        rollouts = engine.generate(prompts, sampling)
        return sum(len(o.token_ids) for r in rollouts for o in r.outputs)

    def peer() -> int:
        with torch.no_grad():
            out = thinker.generate(
                **peer_inputs, do_sample=True, max_new_tokens=args.new_tokens, top_k=0, top_p=1.0,
                temperature=1.0, pad_token_id=pad, suppress_tokens=list(suppress),
            )
            length = peer_inputs["input_ids"].shape[1]
            mask = torch.cat([peer_inputs["attention_mask"], torch.ones_like(out[:, length:])], dim=1)
            media_inputs = {k: v for k, v in peer_inputs.items() if k not in ("input_ids", "attention_mask")}
            logits = thinker(input_ids=out, attention_mask=mask, **media_inputs).logits[:, length - 1 : -1]
            torch.log_softmax(logits.float(), -1).gather(-1, out[:, length:, None])
        return int(out[:, length:].numel())

    sides: dict[str, Callable[[], int]] = {
        "omni-rl LocalEngine": ours, "transformers generate + log-prob pass": peer,
    }
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    tokens: dict[str, list[int]] = {name: [] for name in sides}
    for fn in sides.values():
        fn()  # warm-up
    load_before = os.getloadavg()
    for _ in range(args.repeats):
        for name, fn in sides.items():
            started = time.perf_counter()
            tokens[name].append(fn())
            seconds[name].append(time.perf_counter() - started)
    load_after = os.getloadavg()
    counts = {name: sum(values) for name, values in tokens.items()}
    if len(set(counts.values())) != 1:
        raise AssertionError(f"Generated tokens differ: {counts}")
    rates = {name: counts[name] / sum(seconds[name]) for name in sides}
    for name in sides:
        print(f"{name:<40}{rates[name]:>10.0f} tokens/s  ({counts[name]} tokens in {sum(seconds[name]):.2f} s)")
    ours_name, peer_name = sides
    ratio = rates[ours_name] / rates[peer_name]
    out = args.out or Path("outputs/benchmarks") / f"rollout-{args.modality.replace('+', '-')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "rollout", "args": {k: str(v) for k, v in vars(args).items()},
        "seconds": seconds, "tokens": tokens, "tokens_per_s": rates, "ratio": ratio,
        "load_average_before": load_before, "load_average_after": load_after, "cpus": os.cpu_count(),
        "machine": platform.platform(), "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }, indent=1))
    print(f"raw numbers: {out}")
    print(
        f"ratio ours/peer: {ratio:.2f}x  ({args.modality}, {args.prompts} prompts x n={args.n}, {args.new_tokens} "
        f"new tokens, torch threads {torch.get_num_threads()}, load {load_before[0]:.1f} -> {load_after[0]:.1f})"
    )


if __name__ == "__main__":
    main()
