"""Rollout sizing of the verl engine: the pre-flight refuses a rollout whose weights per GPU
leave vLLM no KV cache in its memory share, and says what to change; the packaged defaults and
the Qwen3-Omni recipes (examples/) pass on 80 GB GPUs, sized as verl-omni's recipes; the actor's
offload switches reach verl and are refused by the local engine."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from omni_contracts import TrainingAdapter
from omni_trainer import gpu_plan
from omni_trainer.config import Config, ConfigError, load_config
from omni_trainer.preflight import preflight
from omni_trainer.resolved import resolve_run

ROOT = Path(__file__).resolve().parents[3]
QWEN3_RECIPES = ("gsm8k_gspo_lora.sh", "mmk12_gspo_lora.sh", "avqa_gspo_lora.sh", "mmk12_opd_lora.sh")
FULL_FINE_TUNE_RECIPES = {"geometry3k_gspo.sh": 4, "audiomcq_gspo.sh": 4, "nextqa_gspo.sh": 2, "avqa_video_gspo.sh": 4,
                          "omnivideo_qi_gspo.sh": 2}
"""verl-omni's full-parameter recipes (Megatron or FSDP there) -> the rollout's tensor parallel size."""
# Qwen3-Omni-30B-A3B's thinker text decoder, from the released checkpoint's config.json
# (thinker_config.text_config; benchmarks/gpu.py lists the same sizes). The vision and audio
# encoders keep transformers' defaults: 31.75B parameters in all, 59.1 GiB in bf16.
REAL_TEXT = {
    "vocab_size": 152064, "hidden_size": 2048, "intermediate_size": 768, "moe_intermediate_size": 768,
    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "norm_topk_prob": True,
    "max_position_embeddings": 65536, "tie_word_embeddings": False,
}


@pytest.fixture(scope="module")
def qwen3_omni_30b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 30B checkpoint's config.json alone (nothing is loaded: parameters are counted on meta)."""
    from transformers import Qwen3OmniMoeConfig

    config = Qwen3OmniMoeConfig(thinker_config={"text_config": REAL_TEXT}, enable_audio_output=False)
    config.architectures = ["Qwen3OmniMoeForConditionalGeneration"]
    directory = tmp_path_factory.mktemp("ckpt") / "Qwen3-Omni-30B-A3B-Instruct"
    config.save_pretrained(directory)
    return directory


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check's documented assumption when no GPU is visible: an 80 GB one (79.2 GiB)."""
    monkeypatch.setattr(gpu_plan, "visible_gpu", lambda: None)


def verl_run(model: Path, tmp_path: Path, *overrides: str) -> list[str]:
    train = tmp_path / "train.parquet"
    pq.write_table(pa.table({"data_source": ["openai/gsm8k"] * 4, "prompt": ["q"] * 4}), train)
    return [f"actor_rollout_ref.model.path={model}", f"data.train_files=[{train}]", "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4", "trainer.engine=verl", "trainer.n_gpus_per_node=4",
            f"trainer.default_local_dir={tmp_path / 'run'}", *overrides]


def test_30b_thinker_on_one_gpu_per_replica_at_half_the_gpu_is_refused(qwen3_omni_30b: Path, tmp_path: Path) -> None:
    config = load_config(verl_run(qwen3_omni_30b, tmp_path, "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                                  "actor_rollout_ref.rollout.gpu_memory_utilization=0.5"))
    with pytest.raises(ConfigError) as info:
        preflight(resolve_run(config))
    (problem,) = [p for p in info.value.problems if "rollout's weights" in p]
    # 31.75e9 parameters x 2 B = 59.1 GiB on each GPU at TP=1; 0.5 x 79.2 GiB = 39.6 GiB.
    assert "59.1 GiB per GPU (31.75B parameters in bf16 / tensor_model_parallel_size=1)" in problem
    assert "gpu_memory_utilization=0.5 x 79.2 GiB = 39.6 GiB (an 80 GB GPU, assumed: none is visible here)" in problem
    assert "no room for a KV cache, and vLLM refuses to start" in problem
    # TP=2 halves the weights (29.6 GiB < 39.6); or the whole 59.3 GiB (one 2048-token sequence's
    # KV cache, 0.19 GiB, included) in a share of 0.75 x 79.2 GiB with the actor offloaded.
    assert "set actor_rollout_ref.rollout.tensor_model_parallel_size=2 (29.6 GiB of weights per GPU)" in problem
    assert ("raise actor_rollout_ref.rollout.gpu_memory_utilization to 0.75 or more, with "
            "actor_rollout_ref.actor.fsdp_config.param_offload=true and optimizer_offload=true") in problem


def test_packaged_defaults_start_the_30b_thinker_on_80gb_gpus(qwen3_omni_30b: Path) -> None:
    config = load_config([f"actor_rollout_ref.model.path={qwen3_omni_30b}", "trainer.engine=verl"])
    rollout = config.actor_rollout_ref.rollout
    assert (rollout.tensor_model_parallel_size, rollout.gpu_memory_utilization) == (2, 0.5)  # verl-omni's defaults
    assert gpu_plan.rollout_memory_problem(config, *model(config), None) is None


def script_overrides(script: str, model_path: Path, tmp_path: Path) -> list[str]:
    """The arguments ``script`` passes to ``uv run trainer`` (a stand-in ``uv`` prints them)."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "uv").write_text('#!/usr/bin/env bash\nshift 2\nprintf "%s\\n" "$@"\n')
    (fake / "uv").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "MODEL_PATH": str(model_path),
           "TEACHER_PATH": str(model_path), "TRAIN_FILE": "/data/train.parquet", "VAL_FILE": "/data/val.parquet"}
    done = subprocess.run(["bash", str(ROOT / "examples" / script)], env=env, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


@pytest.mark.parametrize("script", QWEN3_RECIPES)
def test_qwen3_recipes_start_on_80gb_gpus_as_verl_omnis_do(script: str, qwen3_omni_30b: Path, tmp_path: Path) -> None:
    config = load_config(script_overrides(script, qwen3_omni_30b, tmp_path))
    rollout, fsdp = config.actor_rollout_ref.rollout, config.actor_rollout_ref.actor.fsdp_config
    # verl-omni's Qwen3-Omni launchers (4 x H800 80GB): rollout TP=2 at 0.8 of the GPU (0.7 for
    # audio), the actor's parameters and optimizer state offloaded while vLLM holds the GPU.
    assert config.trainer.engine == "verl" and rollout.tensor_model_parallel_size == 2
    assert rollout.gpu_memory_utilization == (0.7 if script.startswith("avqa") else 0.8)
    assert fsdp.param_offload and fsdp.optimizer_offload
    assert gpu_plan.rollout_memory_problem(config, *model(config), None) is None


@pytest.mark.parametrize("script", sorted(FULL_FINE_TUNE_RECIPES))
def test_full_fine_tune_recipes_start_on_80gb_gpus(script: str, qwen3_omni_30b: Path, tmp_path: Path) -> None:
    """The full fine-tunes share their GPUs with vLLM-Omni at 0.6 of each, as verl-omni's
    rollouts take it, with the actor offloaded while vLLM-Omni holds the GPU."""
    config = load_config(script_overrides(script, qwen3_omni_30b, tmp_path))
    rollout, fsdp = config.actor_rollout_ref.rollout, config.actor_rollout_ref.actor.fsdp_config
    assert config.trainer.engine == "verl" and config.actor_rollout_ref.model.lora_rank == 0
    assert rollout.tensor_model_parallel_size == FULL_FINE_TUNE_RECIPES[script] and rollout.gpu_memory_utilization == 0.6
    assert fsdp.param_offload and fsdp.optimizer_offload
    assert gpu_plan.rollout_memory_problem(config, *model(config), None) is None


def test_tensor_parallel_size_must_tile_the_gpus(tmp_path: Path) -> None:
    config = load_config([*verl_run(tmp_path / "none", tmp_path), "trainer.n_gpus_per_node=1"])
    with pytest.raises(ConfigError) as info:
        preflight(resolve_run(config))
    assert ("actor_rollout_ref.rollout.tensor_model_parallel_size=2 does not divide the 1 GPUs of trainer.nnodes x "
            "trainer.n_gpus_per_node; on one GPU set actor_rollout_ref.rollout.tensor_model_parallel_size=1"
            ) in info.value.problems


def test_the_local_engine_refuses_actor_offload_by_name() -> None:
    with pytest.raises(ConfigError) as info:
        preflight(resolve_run(load_config(["actor_rollout_ref.actor.fsdp_config.param_offload=true",
                               "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true"])))
    for name in ("param_offload", "optimizer_offload"):
        (problem,) = [p for p in info.value.problems if f"fsdp_config.{name}=true" in p]
        assert "the local engine keeps its actor on its one device" in problem and "trainer.engine=verl" in problem


@pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="needs verl's packaged config (distributed extra)")
def test_actor_offload_reaches_verl_under_its_own_keys(qwen3_omni_30b: Path, tmp_path: Path) -> None:
    from omni_trainer.engines.verl.translate import to_verl_config

    config = load_config(verl_run(qwen3_omni_30b, tmp_path, "actor_rollout_ref.actor.fsdp_config.param_offload=true"))
    actor = to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None).actor_rollout_ref.actor
    assert actor.fsdp_config.param_offload is True and actor.fsdp_config.optimizer_offload is False


def model(config: Config) -> tuple[Any, TrainingAdapter]:
    """The checkpoint's transformers config and training adapter, as the pre-flight reads them."""
    found = gpu_plan.model_for_plan(resolve_run(config))
    assert found is not None, config.actor_rollout_ref.model.path
    return found
