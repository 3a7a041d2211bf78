"""On-policy distillation with the local engine: a noised tiny Qwen3-Omni student learns
from its un-noised teacher; config and tokenizer errors come before any compute."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from omni_trainer.config import ConfigError, load_config
from omni_trainer.resolved import resolve_run
from omni_training.distillation import DistillationConfigError


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "omni-rl-cache"


@pytest.fixture(scope="module")
def teacher_path(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    """The tiny Qwen3-Omni with a 20x output layer.

    A randomly initialised model is close to uniform over its 4k vocabulary, so there is
    nothing to distil; scaling the thinker's LM head gives it a peaked distribution, as a
    trained teacher has.
    """
    from safetensors.torch import load_file, save_file

    from omni_qwen3.tiny import build_tiny_qwen3_omni

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMNI_RL_CACHE", str(cache_dir))
        tiny = build_tiny_qwen3_omni()
    out = tmp_path_factory.mktemp("teacher")
    shutil.copytree(tiny, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.safetensors"))
    for shard in tiny.glob("*.safetensors"):
        tensors = load_file(shard)
        tensors["thinker.lm_head.weight"] = tensors["thinker.lm_head.weight"] * 20
        save_file(tensors, out / shard.name, metadata={"format": "pt"})
    return out


@pytest.fixture(scope="module")
def student_path(teacher_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_trainer.cli import main

    out = tmp_path_factory.mktemp("student") / "noised"
    assert main(["model", "noise", "--src", str(teacher_path), "--out", str(out), "--fraction", "0.25", "--seed", "0"]) == 0
    return out


def distillation_overrides(student: Path, teacher: Path, run_dir: Path) -> list[str]:
    return [
        f"actor_rollout_ref.model.path={student}", f"trainer.default_local_dir={run_dir}",
        "distillation.enabled=true", f"distillation.teacher_models.teacher_model.model_path={teacher}",
        "distillation.distillation_loss.use_task_rewards=false",
        # The teacher's top-k distribution as a direct loss: the strongest signal per step. The
        # seeds' kl + policy-gradient mode learns too, more slowly (tests/test_examples.py runs
        # it; packages/omni-training/tests/test_distillation.py checks its update direction).
        "distillation.distillation_loss.loss_mode=forward_kl_topk",
        "distillation.distillation_loss.use_policy_gradient=false",
        "data.builtin_task_size=64", "data.train_batch_size=4", "data.max_response_length=8",
        "actor_rollout_ref.rollout.n=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        # Full fine-tuning: the noise is spread over every layer, LoRA on attention cannot undo it.
        "actor_rollout_ref.model.lora_rank=0", "actor_rollout_ref.actor.optim.lr=3e-4", "reward.num_workers=1",
        "trainer.save_freq=0", "trainer.test_freq=0",
    ]


def test_enabled_without_a_teacher_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"distillation.teacher_models.teacher_model.model_path"):
        load_config(["distillation.enabled=true"])


@pytest.mark.slow
def test_tokenizer_mismatch_fails_before_weights_load(
    teacher_path: Path, student_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_dir: Path
) -> None:
    from omni_trainer.engines.local.trainer import LocalTrainer

    monkeypatch.setenv("OMNI_RL_CACHE", str(cache_dir))
    other = tmp_path / "other-tokenizer"
    shutil.copytree(teacher_path, other)
    tokenizer = json.loads((other / "tokenizer.json").read_text())
    tokenizer["added_tokens"].append({
        "id": max(t["id"] for t in tokenizer["added_tokens"]) + 1, "content": "<|extra|>", "single_word": False,
        "lstrip": False, "rstrip": False, "normalized": False, "special": True,
    })
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = load_config([
        *distillation_overrides(student_path, other, tmp_path / "run"),
        f"distillation.teacher_models.teacher_model.model_path={other}",
    ])
    trainer = LocalTrainer(resolve_run(config))
    with pytest.raises(DistillationConfigError, match="differ in vocabulary size"):
        trainer.setup()
    assert not hasattr(trainer, "actor")  # refused before the student's weights were loaded


@pytest.mark.slow
def test_distillation_only_run_moves_the_student_toward_the_teacher(
    teacher_path: Path, student_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_dir: Path
) -> None:
    from omni_trainer.engines.local.trainer import LocalTrainer
    from omni_rollout.local_engine import LocalEngine, find_policy_module
    from omni_rollout.sampling import SamplingSettings
    from omni_training.batching import MicroBatch, collate

    monkeypatch.setenv("OMNI_RL_CACHE", str(cache_dir))
    run_dir = tmp_path / "run"
    trainer = LocalTrainer(resolve_run(load_config([*distillation_overrides(student_path, teacher_path, run_dir),
                                        "trainer.total_training_steps=40"])))
    trainer.setup()
    teacher = trainer.task.teacher  # type: ignore[attr-defined]
    assert teacher is not None

    # Held-out prompts (the built-in validation rows), with responses the teacher samples.
    teacher_engine = LocalEngine(
        find_policy_module(teacher.model, trainer.rollout_adapter, trainer.mode),
        eos_token_ids=(trainer.tokenizer.eos_token_id,), pad_token_id=trainer.engine.pad_token_id,
    )
    prompts = [p.inputs for p in trainer.val_rows[:8]]
    rollouts = teacher_engine.generate(prompts, SamplingSettings(n=2, max_new_tokens=8, seed=7))
    rows = [(prompt, out.token_ids) for prompt, r in zip(prompts, rollouts, strict=True) for out in r.outputs]
    inputs, responses, mask = collate([p for p, _ in rows], [t for _, t in rows], pad_token_id=trainer.engine.pad_token_id)
    held_out = MicroBatch(inputs, responses, mask)
    (teacher_lp,) = [t.log_probs for t in teacher.score([held_out])]

    def gap() -> float:
        (student_lp,) = trainer.actor.compute_log_probs([held_out])
        return float(((student_lp - teacher_lp).abs() * mask).sum() / mask.sum())

    before = gap()
    trainer.fit()
    after = gap()

    rows_logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows_logged = [row for row in rows_logged if row["step"] >= 1]  # step 0: validation before training
    kl = [row["distill/kl_mean"] for row in rows_logged]
    assert all(torch.isfinite(torch.tensor(kl))) and len(kl) == 40
    assert all("distill/teacher_logprob_mean" in row and "actor/distill_loss" in row for row in rows_logged)
    first, last = sum(kl[:5]) / 5, sum(kl[-5:]) / 5
    print(f"distill/kl_mean first 5 steps {first:.3f} -> last 5 {last:.3f}; held-out |gap| {before:.3f} -> {after:.3f}")
    assert last < 0.6 * first, kl
    assert after < 0.8 * before, (before, after)
