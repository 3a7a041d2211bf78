"""verl's FSDP2 engine builds a LoRA actor from our translated config, on the CPU.

Run as a script (``python verl_lora_harness.py OUT_DIR``) by ``test_verl_lora_dtype.py``, in
a process of its own (verl picks its device platform once per process; this one is the CPU
platform of ``omni_verl_cpu.platform``). verl 0.9.1's engine code runs unchanged: our
``OmniFSDPEngine`` loads the tiny Qwen3-Omni thinker with the translated
``fsdp_config.model_dtype``, verl's ``_build_lora_module`` injects LoRA (casting the adapter to
the base's dtype), verl wraps it with FSDP2 and its default mixed precision and builds AdamW
(one gloo process). Then:

- one forward records the dtype a LoRA layer's weights have while it runs;
- every trainable parameter gets a gradient of ones and verl's ``optimizer_step`` (clip, then
  AdamW at lr 3e-6) runs once; what each ``lora_A`` element moved is recorded;
- with every ``lora_B`` drawn at random (an adapter that has learned something), the weights a
  merged-LoRA weight sync streams to the rollout (``get_per_tensor_param``, ours and verl's own
  ``_merged_lora_per_tensor_param``) are compared with ``W + scaling * B @ A`` computed here
  in float64 from the live shards, and the live base weights after the stream with before.

The JSON report holds what the test asserts; nothing is judged here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LR = 3e-6


def main(out_dir: Path) -> None:
    sys.path.insert(0, str(HERE))
    from omni_verl_cpu.platform import use_cpu_platform

    use_cpu_platform()  # before any verl module asks for a device

    import os

    import torch
    from verl_cpu_harness import fsdp_engine

    from omni_contracts import get_training_adapter
    from omni_qwen3.tiny import build_tiny_qwen3_omni
    import omni_verl.external  # noqa: F401  (registers our engine, as in every verl process)
    from omni_trainer.config import load_config
    from omni_verl.settings import SETTINGS_ENV
    from omni_trainer.engines.verl.translate import settings_for, to_verl_config

    out_dir.mkdir(parents=True, exist_ok=True)
    tiny = str(build_tiny_qwen3_omni(out_dir / "tiny", seed=0))
    architecture = json.loads((Path(tiny) / "config.json").read_text())["architectures"][0]
    adapter = get_training_adapter(architecture, "thinker")
    config = load_config([
        f"actor_rollout_ref.model.path={tiny}", "data.train_files=[/unused.parquet]", "trainer.engine=verl",
        "actor_rollout_ref.model.lora_rank=8", f"actor_rollout_ref.actor.optim.lr={LR}",
        "actor_rollout_ref.actor.optim.weight_decay=0.0", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
    ])
    targets = adapter.lora_target_modules
    verl_config = to_verl_config(config, lora_target_modules=list(targets) if targets else None,
                                 lora_exclude_modules=adapter.lora_exclude_modules)
    os.environ[SETTINGS_ENV] = settings_for(config, tiny).to_env()
    engine = fsdp_engine(verl_config)
    module = engine.module

    named = list(module.named_parameters())
    trainable = [(name, p) for name, p in named if p.requires_grad]
    lora_a = [(name, p) for name, p in trainable if "lora_A" in name]

    # The dtype a LoRA layer's weights have during the forward (FSDP2 casts them on unshard).
    seen: dict[str, str] = {}
    layer = next(m for m in module.modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer"))

    def record(_module: Any, _inputs: Any) -> None:
        seen.update(base=str(layer.base_layer.weight.dtype), lora_A=str(layer.lora_A["default"].weight.dtype))

    hook = layer.register_forward_pre_hook(record)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        module(input_ids=ids, attention_mask=torch.ones_like(ids))
    hook.remove()

    before = [p.detach().full_tensor().float().clone() for _, p in lora_a]
    for _, p in trainable:
        p.grad = torch.ones_like(p)
    grad_norm = float(engine.optimizer_step())
    after = [p.detach().full_tensor().float() for _, p in lora_a]
    moved = torch.cat([(a - b).abs().flatten() for a, b in zip(after, before, strict=True)])
    magnitude = torch.cat([b.abs().flatten() for b in before])
    state_dtypes = {str(t.dtype) for _, p in trainable for t in engine.optimizer.state[p].values()
                    if torch.is_tensor(t) and t.is_floating_point() and t.dim() > 0}
    report = {
        "model_dtype": verl_config.actor_rollout_ref.actor.fsdp_config.model_dtype,
        "trainable": len(trainable),
        "trainable_are_lora": all("lora_" in name for name, _ in trainable),
        "trainable_dtypes": sorted({str(p.dtype) for _, p in trainable}),
        "frozen_dtypes": sorted({str(p.dtype) for _, p in named if not p.requires_grad}),
        "optimizer_state_dtypes": sorted(state_dtypes),
        "forward_weight_dtypes": seen,
        "lr": engine.optimizer.param_groups[0]["lr"],
        "grad_norm": grad_norm,
        "lora_a_elements": int(moved.numel()),
        "lora_a_mean_abs": float(magnitude.mean()),
        "lora_a_moved_fraction": float((moved > 0).float().mean()),
        "lora_a_moved_max": float(moved.max()),
    }
    report.update(merged_sync_report(engine))
    (out_dir / "report.json").write_text(json.dumps(report, indent=1))
    torch.distributed.destroy_process_group()


def merged_sync_report(engine: Any) -> dict[str, Any]:
    import torch
    from peft.tuners.lora import LoraLayer
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    module = engine.module
    torch.manual_seed(0)
    layers = {name.replace("base_model.model.", ""): layer for name, layer in module.named_modules()
              if isinstance(layer, LoraLayer)}
    with torch.no_grad():
        for layer in layers.values():
            layer.lora_B["default"].weight.to_local().normal_(0.0, 0.05)
    expected = {
        f"{name}.weight": (layer.base_layer.weight.full_tensor().double() + layer.scaling["default"]
                           * layer.lora_B["default"].weight.full_tensor().double()
                           @ layer.lora_A["default"].weight.full_tensor().double())
        for name, layer in layers.items()
    }
    bases = {name: layer.base_layer.weight.full_tensor().clone() for name, layer in layers.items()}

    def compare(stream: Any) -> dict[str, Any]:
        sent = dict(stream)
        return {
            "missing": sorted(set(expected) - set(sent)),
            "max_abs_diff": max(float((sent[k].double() - v).abs().max()) for k, v in expected.items() if k in sent),
            "delta_norm": max(float((v - bases[k.removesuffix(".weight")].double()).abs().max()) for k, v in expected.items()),
            "dtypes": sorted({str(t.dtype) for t in sent.values()}),
            "packed_expert_keys": sorted(k for k in sent if k.endswith(("experts.gate_up_proj", "experts.down_proj"))),
            "per_expert_keys": sum(1 for k in sent if ".experts.0." in k),
        }

    ours, _ = engine.get_per_tensor_param(layered_summon=False, base_sync_done=True)
    report = {"ours": compare(ours)}
    report["verls"] = compare(FSDPEngine._merged_lora_per_tensor_param(engine))
    report["bases_restored"] = all(
        torch.equal(layer.base_layer.weight.full_tensor(), bases[name]) for name, layer in layers.items()
    )
    return {"merged_sync": report}


if __name__ == "__main__":
    main(Path(sys.argv[1]))
