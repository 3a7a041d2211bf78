"""``python -m omni_qwen3.tiny --out DIR [--seed N]``: build the tiny checkpoint."""

from functools import partial

from omni_model_kit.tiny import tiny_cli

from omni_qwen3.tiny.build import FAMILY, build_tiny_qwen3_omni

main = partial(tiny_cli, package="omni_qwen3", family=FAMILY, build=build_tiny_qwen3_omni)

if __name__ == "__main__":
    raise SystemExit(main())
