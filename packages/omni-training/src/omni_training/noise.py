"""Make a noised copy of a checkpoint: the student of an on-policy distillation run.

``python -m omni_training.noise --src DIR --out DIR --fraction 0.25 --seed S``
(also ``trainer model noise ...``)

A ``fraction`` of the elements of every selected floating-point tensor gets Gaussian noise
whose standard deviation is ``relative_std`` times that tensor's root-mean-square, so
every layer is disturbed in proportion to its own scale (norm weights of 1.0 as much as
projections of 0.02); all-zero tensors stay as they are. Tensors are read and written with safetensors, without building the
model; every other file is copied. The settings and counts are recorded under
``omni_rl_noise`` in the output's ``config.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from omni_training.cli_messages import one_line


@dataclass(frozen=True)
class NoiseReport:
    source: str
    fraction: float
    relative_std: float
    seed: int
    include: str
    tensors_noised: int
    elements_noised: int
    elements_total: int


def noise_checkpoint(
    src: str | Path,
    out: str | Path,
    *,
    fraction: float = 0.25,
    relative_std: float = 0.5,
    seed: int = 0,
    include: str = ".*",
) -> NoiseReport:
    """Write ``src`` with noised weights to ``out`` (which must not exist).

    Raises:
        ValueError: ``fraction`` outside (0, 1], a negative ``relative_std``, or ``include`` is
            not a regular expression.
        FileNotFoundError: ``src`` has no ``config.json`` or no ``*.safetensors``.
        FileExistsError: ``out`` exists.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}.")
    if relative_std < 0:
        raise ValueError(f"relative_std must be >= 0, got {relative_std}.")
    src, out = Path(src), Path(out)
    if not (src / "config.json").is_file():
        raise FileNotFoundError(f"{src} has no config.json; pass a Hugging Face checkpoint directory.")
    shards = sorted(src.glob("*.safetensors"))
    if not shards:
        raise FileNotFoundError(
            f"{src} has no *.safetensors files; re-save the checkpoint with safe_serialization=True."
        )
    if out.exists():
        raise FileExistsError(f"{out} exists; choose a new directory for the noised checkpoint.")
    try:
        pattern = re.compile(include)
    except re.error as exc:
        raise ValueError(f"--include {include!r} is not a regular expression ({exc}).") from None
    try:
        shutil.copytree(src, out, ignore=shutil.ignore_patterns("*.safetensors"))
        report = _write_noised(src, out, shards, pattern, fraction, relative_std, seed, include)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # ours, half written: never left to look like a checkpoint
        raise
    return report


def _write_noised(
    src: Path, out: Path, shards: list[Path], pattern: re.Pattern[str], fraction: float, relative_std: float,
    seed: int, include: str,
) -> NoiseReport:
    from safetensors import safe_open
    from safetensors.torch import save_file

    noised = elements_noised = elements_total = 0
    for shard in shards:
        tensors: dict[str, torch.Tensor] = {}
        with safe_open(str(shard), framework="pt") as handle:
            metadata = handle.metadata()
            for name in handle.keys():
                tensor = handle.get_tensor(name)
                if tensor.is_floating_point() and pattern.search(name) and tensor.numel() > 0:
                    tensor, count = _noise_tensor(tensor, name, fraction, relative_std, seed)
                    noised += count > 0
                    elements_noised += count
                    elements_total += tensor.numel()
                tensors[name] = tensor.contiguous()
        save_file(tensors, str(out / shard.name), metadata=metadata)
    report = NoiseReport(
        source=str(src.resolve()), fraction=fraction, relative_std=relative_std, seed=seed, include=include,
        tensors_noised=noised, elements_noised=elements_noised, elements_total=elements_total,
    )
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    config["omni_rl_noise"] = asdict(report)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return report


def _noise_tensor(
    tensor: torch.Tensor, name: str, fraction: float, relative_std: float, seed: int
) -> tuple[torch.Tensor, int]:
    # One generator per tensor, seeded from its name: the result does not depend on how
    # the checkpoint is sharded or in which order tensors are stored.
    generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    values = tensor.to(torch.float32)
    scale = relative_std * float(values.square().mean().sqrt())
    if scale == 0:  # an all-zero tensor (e.g. a bias) has no scale to be relative to
        return tensor, 0
    chosen = torch.rand(values.shape, generator=generator) < fraction
    noise = torch.randn(values.shape, generator=generator) * scale
    return (values + noise * chosen).to(tensor.dtype), int(chosen.sum())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="trainer model noise", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--src", required=True, help="the checkpoint to copy (the teacher)")
    parser.add_argument("--out", required=True, help="where to write the noised checkpoint (the student)")
    parser.add_argument("--fraction", type=float, default=0.25, help="share of each tensor's elements noised")
    parser.add_argument(
        "--relative-std", type=float, default=0.5, help="noise std as a multiple of each tensor's RMS"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--include", default=".*", help="regex on tensor names to noise (default: all)")
    args = parser.parse_args(argv)
    from safetensors import SafetensorError

    try:
        report = noise_checkpoint(
            args.src, args.out, fraction=args.fraction, relative_std=args.relative_std, seed=args.seed,
            include=args.include,
        )
    except (OSError, ValueError, SafetensorError) as exc:  # bad paths or settings, a corrupt shard
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    share = report.elements_noised / max(1, report.elements_total)
    print(
        f"{args.out}: noised {report.elements_noised:,} of {report.elements_total:,} elements "
        f"({share:.1%}) in {report.tensors_noised} tensors (relative std {report.relative_std}, seed {report.seed})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
