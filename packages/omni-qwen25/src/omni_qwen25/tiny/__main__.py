"""``python -m omni_qwen25.tiny --out DIR [--seed N]``: build the tiny checkpoint."""

from __future__ import annotations

import argparse
import time

from omni_contracts.tiny import default_cache_dir

from omni_qwen25.tiny.build import FAMILY, build_tiny_qwen25_omni


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m omni_qwen25.tiny", description=__doc__)
    parser.add_argument("--out", help=f"output directory (default: under {default_cache_dir() / FAMILY})")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    path = build_tiny_qwen25_omni(args.out, seed=args.seed)
    print(f"{path}  ({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
