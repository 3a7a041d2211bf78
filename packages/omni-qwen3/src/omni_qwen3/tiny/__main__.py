"""``python -m omni_qwen3.tiny --out DIR [--seed N]``: build the tiny checkpoint."""

from __future__ import annotations

import argparse
import time

from omni_qwen3.tiny.build import build_tiny_qwen3_omni, default_cache_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m omni_qwen3.tiny", description=__doc__)
    parser.add_argument("--out", help=f"output directory (default: under {default_cache_dir()})")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    path = build_tiny_qwen3_omni(args.out, seed=args.seed)
    print(f"{path}  ({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
