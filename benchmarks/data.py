"""Rows/s of RL dataset iteration with media decode: omni_data vs verl's RLHFDataset.

Both sides read the same parquet and do the same work per row: build the chat messages,
decode the media with Qwen's loaders, apply the chat template and run the (tiny)
Qwen3-Omni processor to prompt ids and multimodal tensors. verl's ``__getitem__`` only
returns the raw messages (its agent loop decodes media later), so its side is timed as
``__getitem__`` + ``_process_multi_modal_info`` + ``build_multimodal_processor_inputs``,
the calls its single-turn agent loop makes. Load time (reading the parquet and the
overlong-prompt filter, which encodes every row on both sides) is printed separately.

Usage: ``uv run --frozen python benchmarks/data.py [--rows 48] [--repeat 3]``. Needs the
``distributed`` extra (verl). The ratios are printed again last; the raw numbers go to
``outputs/benchmarks/data.json`` (``--out``). Never a CI gate.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from omni_data import DatasetConfig, RLDataset, rl_row, write_rl_parquet

WORKLOADS = ("text", "image", "image+audio", "video")


def _png(seed: int, size: tuple[int, int] = (96, 64)) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _wav(path: Path, seconds: float, seed: int) -> str:
    import soundfile as sf

    rate = 16_000
    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, (0.4 * np.sin(2 * np.pi * (220 + 20 * seed) * t)).astype(np.float32), rate)
    return str(path)


def _mp4(path: Path, frames: int = 8, fps: int = 4, size: int = 64) -> str:
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for i in range(frames):
            array = np.full((size, size, 3), i * 25, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(array, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)


def write_workload(kind: str, rows: int, root: Path) -> Path:
    out = []
    for i in range(rows):
        question = f"Question {i}: what is {i} plus {i}?"
        media: dict[str, Any] = {}
        if kind == "image":
            question = "<image>" + question
            media["images"] = [{"bytes": _png(i), "path": f"{i}.png"}]
        elif kind == "image+audio":
            question = "<image><audio>" + question
            image = root / f"img{i}.png"
            image.write_bytes(_png(i))
            media["images"] = [str(image)]
            media["audios"] = [_wav(root / f"clip{i}.wav", 2.0, i)]
        elif kind == "video":
            question = "<video>" + question
            media["videos"] = [_mp4(root / f"clip{i}.mp4")]
        out.append(
            rl_row(
                data_source="bench",
                messages=[{"role": "user", "content": question}],
                ground_truth=str(2 * i),
                ability="math",
                extra_info={"split": "bench", "index": i},
                **media,
            )
        )
    return write_rl_parquet(out, root / f"{kind.replace('+', '_')}.parquet")


def _best_rates(passes: dict[str, Callable[[], int]], repeat: int) -> dict[str, float]:
    """Rows/s per side: one untimed warm-up pass each, then ``repeat`` rounds that alternate
    the sides (so a busy machine slows both alike); the best pass of each side is kept."""
    for run in passes.values():
        run()
    best = {name: float("inf") for name in passes}
    rows = {name: 0 for name in passes}
    for _ in range(repeat):
        for name, run in passes.items():
            start = time.perf_counter()
            rows[name] = run()
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: rows[name] / best[name] for name in passes}


def bench_omni(path: Path, processor: Any) -> tuple[float, Callable[[], int]]:
    """Load time and one full pass over the dataset (rows read)."""
    start = time.perf_counter()
    dataset = RLDataset(path, processor, DatasetConfig(max_prompt_length=4096))
    load = time.perf_counter() - start

    def iterate() -> int:
        for i in range(len(dataset)):
            dataset[i]
        return len(dataset)

    return load, iterate


def bench_verl(path: Path, processor: Any, cache: Path) -> tuple[float, Callable[[], int]]:
    """Load time and one pass doing what verl's single-turn agent loop does per row."""
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.tokenizer import build_multimodal_processor_inputs

    config = OmegaConf.create(
        {"max_prompt_length": 4096, "filter_overlong_prompts": True, "cache_dir": str(cache),
         "filter_overlong_prompts_workers": None}  # None: filter in-process (a fork pool hangs here)
    )
    start = time.perf_counter()
    log = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(log):
        dataset = RLHFDataset(str(path), processor.tokenizer, config, processor=processor)
    load = time.perf_counter() - start
    if len(dataset) == 0:
        errors = [line for line in log.getvalue().splitlines() if "Error" in line and ":" in line]
        raise RuntimeError(f"RLHFDataset kept 0 rows; its length filter said: {errors[-1] if errors else '?'}")

    def iterate() -> int:
        for i in range(len(dataset)):
            messages = dataset[i]["raw_prompt"]
            images, videos, audios = RLHFDataset._process_multi_modal_info(messages, dataset.image_patch_size, config)
            text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            if images is None and videos is None and audios is None:
                processor.tokenizer(text=text, add_special_tokens=False)
            else:
                build_multimodal_processor_inputs(processor, text=[text], images=images, videos=videos, audio=audios)
        return len(dataset)

    return load, iterate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=3, help="iterations per side; the best is kept")
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/data.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    results: list[dict[str, Any]] = []

    from transformers import AutoProcessor

    from omni_qwen3.tiny import build_tiny_qwen3_omni

    processor = AutoProcessor.from_pretrained(build_tiny_qwen3_omni())
    header = f"{'workload':<12} {'omni_data rows/s':>17} {'verl rows/s':>12} {'ratio':>7}   load s (omni / verl)"
    print(header, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for kind in WORKLOADS:
            path = write_workload(kind, args.rows, root)
            omni_load, omni_pass = bench_omni(path, processor)
            try:
                verl_load, verl_pass = bench_verl(path, processor, root / "verl-cache")
            except Exception as exc:  # verl cannot load this workload: say why, keep going
                [omni_rate] = _best_rates({"omni": omni_pass}, args.repeat).values()
                print(
                    f"{kind:<12} {omni_rate:>17.1f} {'n/a':>12} {'n/a':>7}   {omni_load:.2f} / "
                    f"verl failed: {str(exc)[:170]}",
                    flush=True,
                )
                results.append({"workload": kind, "omni_rows_per_s": omni_rate, "omni_load_s": omni_load,
                                "verl_error": str(exc)})
                continue
            rates = _best_rates({"omni": omni_pass, "verl": verl_pass}, args.repeat)
            print(
                f"{kind:<12} {rates['omni']:>17.1f} {rates['verl']:>12.1f} "
                f"{rates['omni'] / rates['verl']:>6.2f}x   {omni_load:.2f} / {verl_load:.2f}",
                flush=True,
            )
            results.append({"workload": kind, "omni_rows_per_s": rates["omni"], "verl_rows_per_s": rates["verl"],
                            "omni_load_s": omni_load, "verl_load_s": verl_load})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "data", "rows": args.rows, "repeat": args.repeat, "workloads": results,
        "load_average_before": load_before, "load_average_after": os.getloadavg(), "cpus": os.cpu_count(),
        "machine": platform.platform(),
    }, indent=1))
    print(f"raw numbers: {args.out}")
    print("ratio omni_data/verl: " + ", ".join(
        f"{r['workload']} {r['omni_rows_per_s'] / r['verl_rows_per_s']:.2f}x" if "verl_rows_per_s" in r
        else f"{r['workload']} n/a (verl failed)" for r in results
    ))


if __name__ == "__main__":
    main()
