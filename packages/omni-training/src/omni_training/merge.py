"""Merge a LoRA adapter into its base checkpoint and write a full Hugging Face checkpoint.

``python -m omni_training.merge --base BASE --adapter RUN/step_N/adapter --out OUT``

The base is loaded whole (nothing stripped), so the result is a complete checkpoint of the
original architecture; every tokenizer, processor, chat-template and generation file of the
base (``omni_training.side_files``) is copied byte for byte, replacing the generation config
``save_pretrained`` re-serialized.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from omni_training.cli_messages import one_line
from omni_training.side_files import side_files


def merge_lora(base: str | Path, adapter: str | Path, out: str | Path, *, auto_class: str = "AutoModelForMultimodalLM") -> Path:
    """Write ``base`` with ``adapter`` merged in to ``out`` (which must not exist).

    Raises:
        FileExistsError: ``out`` exists.
        FileNotFoundError: ``adapter`` has no ``adapter_config.json`` or ``base`` no ``config.json``.
        ValueError: ``auto_class`` is not a transformers auto class, or a ``tokenizer_config.json``
            of ``base`` is not a JSON object.
    """
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists; choose a new directory for the merged checkpoint.")
    if not (Path(adapter) / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{adapter} has no adapter_config.json; pass the checkpoint's adapter/ directory.")
    if not (Path(base) / "config.json").is_file():
        raise FileNotFoundError(f"{base} has no config.json; pass the base model's checkpoint directory.")
    copied = side_files(base)  # a broken tokenizer_config.json is refused before anything is written
    import transformers
    from peft import PeftModel

    if not auto_class.startswith("Auto") or not hasattr(transformers, auto_class):
        raise ValueError(f"--auto-class {auto_class} is not a transformers auto class (e.g. AutoModelForMultimodalLM, "
                         "AutoModelForCausalLM).")
    model = getattr(transformers, auto_class).from_pretrained(base)
    try:
        merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    except RuntimeError as exc:  # PEFT's "Error(s) in loading state_dict": shapes of another model
        raise ValueError(f"{adapter} does not fit {base}: {_trained_on(adapter)}. PEFT: {exc}") from exc
    merged.save_pretrained(out)
    for name in copied:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(base) / name, out / name)
    return out


def _trained_on(adapter: str | Path) -> str:
    """Which base the adapter says it was trained on (``base_model_name_or_path`` of its
    ``adapter_config.json``), as a sentence."""
    import json

    config = json.loads((Path(adapter) / "adapter_config.json").read_text())
    trained_on = config.get("base_model_name_or_path")
    if not trained_on:
        return "its adapter_config.json does not name the base it was trained on; merge it into that base"
    return f"it was trained on {trained_on} (its adapter_config.json's base_model_name_or_path); merge it into that base"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m omni_training.merge", description=__doc__)
    parser.add_argument("--base", required=True, help="the base checkpoint directory")
    parser.add_argument("--adapter", required=True, help="a checkpoint's adapter/ directory")
    parser.add_argument("--out", required=True, help="where to write the merged checkpoint")
    parser.add_argument("--auto-class", default="AutoModelForMultimodalLM", help="transformers auto class")
    args = parser.parse_args(argv)
    try:
        print(merge_lora(args.base, args.adapter, args.out, auto_class=args.auto_class))
    except (OSError, ValueError, RuntimeError) as exc:  # bad paths, or an adapter of another base
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
