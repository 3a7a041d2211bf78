"""On-policy distillation: divergences, the actor's distillation update, the teacher, the
tokenizer check, and the noised-student tool."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

from omni_contracts import TrainingAdapter
from omni_training.actor import Actor
from omni_training.batching import MicroBatch, TeacherLogProbs, collate
from omni_training.distillation import (
    DistillationConfigError,
    DistillationSettings,
    Teacher,
    check_shared_tokenizer,
    distillation_token_losses,
)
from omni_training.kl import kl_estimate
from omni_training.logprobs import gather_response_log_probs
from omni_training.noise import noise_checkpoint
from omni_training.policy_loss import PolicyLossConfig
from omni_training.settings import NO_LORA, ActorSettings, LoraSettings, OptimizerSettings

SETTINGS = ActorSettings(
    loss_mode="vanilla", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"), gradient_checkpointing=False
)
OPTIM = OptimizerSettings(lr=1e-6)

# --- settings and divergences -------------------------------------------------------------


def test_settings_refuse_combinations_that_cannot_learn() -> None:
    with pytest.raises(DistillationConfigError, match="ignores the teacher"):
        DistillationSettings(loss_mode="kl", use_policy_gradient=False)
    with pytest.raises(DistillationConfigError, match="Unknown distillation loss_mode 'kl3'.*forward_kl_topk"):
        DistillationSettings(loss_mode="kl3")
    with pytest.raises(DistillationConfigError, match="topk >= 1"):
        DistillationSettings(loss_mode="forward_kl_topk", topk=0, use_policy_gradient=False)
    assert DistillationSettings(loss_mode="k3", use_policy_gradient=False).uses_topk is False


def test_estimator_losses_are_the_kl_estimators_with_clamps() -> None:
    g = torch.Generator().manual_seed(0)
    student = -torch.rand(3, 5, generator=g) * 20
    teacher = -torch.rand(3, 5, generator=g) * 20
    settings = DistillationSettings(loss_mode="k3", use_policy_gradient=False)
    got = distillation_token_losses(student, TeacherLogProbs(teacher), settings)
    torch.testing.assert_close(got, kl_estimate(student, teacher, "k3"))

    clamped = DistillationSettings(loss_mode="kl", log_prob_min_clamp=-5.0, loss_max_clamp=2.0)
    got = distillation_token_losses(student, TeacherLogProbs(teacher), clamped)
    expected = (student.clamp_min(-5.0) - teacher.clamp_min(-5.0)).clamp(-2.0, 2.0)
    torch.testing.assert_close(got, expected)


def test_forward_kl_topk_over_the_whole_vocabulary_is_the_forward_kl() -> None:
    g = torch.Generator().manual_seed(1)
    vocab = 11
    student_logits = torch.randn(2, 4, vocab, generator=g)
    teacher_logits = torch.randn(2, 4, vocab, generator=g) * 3
    responses = torch.randint(0, vocab, (2, 4), generator=g)
    # gather_response_log_probs reads the T positions before the last: append one position.
    pad = torch.zeros(2, 1, vocab)
    teacher = gather_response_log_probs(torch.cat([teacher_logits, pad], 1), responses, topk=vocab)
    assert teacher.topk_ids is not None and teacher.topk_log_probs is not None
    student = gather_response_log_probs(torch.cat([student_logits, pad], 1), responses, gather_ids=teacher.topk_ids)
    settings = DistillationSettings(loss_mode="forward_kl_topk", topk=vocab, use_policy_gradient=False)
    got = distillation_token_losses(
        student.log_probs, TeacherLogProbs(teacher.log_probs, teacher.topk_ids, teacher.topk_log_probs),
        settings, student_topk_log_probs=student.gathered_log_probs,
    )
    p = torch.log_softmax(teacher_logits, -1)
    q = torch.log_softmax(student_logits, -1)
    torch.testing.assert_close(got, (p.exp() * (p - q)).sum(-1))


def test_forward_kl_topk_matches_verl(verl_core_algos: ModuleType) -> None:
    fsdp_losses = pytest.importorskip("verl.trainer.distillation.fsdp.losses")
    g = torch.Generator().manual_seed(2)
    vocab, k, t = 13, 4, 6
    student_logits = torch.randn(1, t, vocab, generator=g)
    teacher_logits = torch.randn(1, t, vocab, generator=g) * 2
    responses = torch.randint(0, vocab, (1, t), generator=g)
    pad = torch.zeros(1, 1, vocab)
    teacher = gather_response_log_probs(torch.cat([teacher_logits, pad], 1), responses, topk=k)
    assert teacher.topk_ids is not None and teacher.topk_log_probs is not None
    student = gather_response_log_probs(torch.cat([student_logits, pad], 1), responses, gather_ids=teacher.topk_ids)
    settings = DistillationSettings(loss_mode="forward_kl_topk", topk=k, use_policy_gradient=False, log_prob_min_clamp=-3.0)
    ours = distillation_token_losses(
        student.log_probs, TeacherLogProbs(teacher.log_probs, teacher.topk_ids, teacher.topk_log_probs),
        settings, student_topk_log_probs=student.gathered_log_probs,
    )
    config = SimpleNamespace(distillation_loss=SimpleNamespace(log_prob_min_clamp=-3.0, use_chunked_topk=False))
    theirs = fsdp_losses.compute_forward_kl_topk(
        student_logits=student_logits,
        teacher_topk_log_probs=torch.nested.as_nested_tensor([teacher.topk_log_probs[0]], layout=torch.jagged),
        teacher_topk_ids=torch.nested.as_nested_tensor([teacher.topk_ids[0]], layout=torch.jagged),
        config=config, data_format="thd",
    )["distillation_losses"]
    torch.testing.assert_close(ours, theirs.clamp_min(0.0))  # verl clamps at 0 after the call


# --- the actor's distillation update on a tiny causal LM ------------------------------------


def _batch(seed: int) -> MicroBatch:
    g = torch.Generator().manual_seed(seed)
    prompts, responses = [], []
    for i in range(6):
        ids = torch.randint(2, 48, (1, 3 + i % 3), generator=g)
        prompts.append({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
        responses.append(torch.randint(2, 48, (3 + i % 2,), generator=g).tolist())
    inputs, resp, mask = collate(prompts, responses, pad_token_id=0)
    return MicroBatch(inputs, resp, mask, advantages=torch.zeros(mask.shape))


@pytest.fixture(scope="module")
def sharp_teacher_path(tiny_lm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny LM with a 10x output layer: a peaked distribution worth distilling."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_lm_path)
    with torch.no_grad():
        model.lm_head.weight.mul_(10)
    path = tmp_path_factory.mktemp("sharp-teacher")
    model.save_pretrained(path)
    return path


@pytest.mark.parametrize(
    "settings",
    [
        DistillationSettings(loss_mode="kl", use_task_rewards=False),
        DistillationSettings(loss_mode="k3", use_policy_gradient=False, use_task_rewards=False),
        DistillationSettings(loss_mode="forward_kl_topk", topk=8, use_policy_gradient=False, use_task_rewards=False),
    ],
    ids=["kl-policy-gradient", "k3-direct", "forward-kl-topk-direct"],
)
def test_distillation_updates_move_the_student_toward_the_teacher(
    tiny_lm_path: Path, sharp_teacher_path: Path, tiny_adapter: TrainingAdapter, settings: DistillationSettings
) -> None:
    teacher = Teacher.from_pretrained(str(sharp_teacher_path), tiny_adapter)
    actor = Actor.from_pretrained(
        str(tiny_lm_path), tiny_adapter, settings=replace(SETTINGS, distillation=settings),
        lora=NO_LORA, optim=OptimizerSettings(lr=3e-3, weight_decay=0.0),
    )
    batch = _batch(0)
    topk = settings.topk if settings.uses_topk else None

    def gap() -> float:
        (student,) = actor.compute_log_probs([batch])
        (scored,) = teacher.score([batch])
        return float(((student - scored.log_probs).abs() * batch.response_mask).sum() / batch.response_mask.sum())

    before = gap()
    for _ in range(15):
        (batch.old_log_probs,) = actor.compute_log_probs([batch])
        (batch.teacher,) = teacher.score([batch], topk=topk)
        metrics = actor.update([batch])
        assert metrics["actor/distill_loss"] == metrics["actor/distill_loss"]  # finite, reported
    assert gap() < 0.7 * before


def test_update_without_teacher_scores_is_an_error(tiny_lm_path: Path, tiny_adapter: TrainingAdapter) -> None:
    actor = Actor.from_pretrained(
        str(tiny_lm_path), tiny_adapter, settings=replace(SETTINGS, distillation=DistillationSettings()),
        lora=LoraSettings(rank=4, alpha=16), optim=OPTIM,
    )
    batch = _batch(1)
    (batch.old_log_probs,) = actor.compute_log_probs([batch])
    with pytest.raises(ValueError, match="no teacher log-probs"):
        actor.update([batch])


def test_teacher_scores_are_the_models_log_probs_masked(tiny_lm_path: Path, tiny_adapter: TrainingAdapter) -> None:
    teacher = Teacher.from_pretrained(str(tiny_lm_path), tiny_adapter)
    actor = Actor.from_pretrained(str(tiny_lm_path), tiny_adapter, settings=SETTINGS, lora=NO_LORA, optim=OPTIM)
    batch = _batch(2)
    (scored,) = teacher.score([batch], topk=5)
    (expected,) = actor.compute_log_probs([batch])
    torch.testing.assert_close(scored.log_probs, expected * batch.response_mask)
    assert scored.topk_ids is not None and scored.topk_ids.shape == (*batch.responses.shape, 5)
    assert not any(p.requires_grad for p in teacher.model.parameters())
    # Frozen: a GPU run's bf16 teacher loads in bf16 (only trained weights need fp32).
    bf16 = Teacher.from_pretrained(str(tiny_lm_path), tiny_adapter, dtype="bfloat16")
    assert {p.dtype for p in bf16.model.parameters()} == {torch.bfloat16}


# --- the tokenizer check ------------------------------------------------------------------


def _tokenizer(words: list[str], specials: list[str]) -> Any:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate([*specials, "[UNK]", *words])}
    backend = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token=specials[0], pad_token=specials[1])


WORDS = ["Teacher", "and", "student", ":", "12345", "+", "0", ".", "5", "=", "?", "<", "answer", ">", "B", "/"]


def test_shared_tokenizer_passes_and_differences_are_named() -> None:
    base = _tokenizer(WORDS, ["<eos>", "<pad>"])
    check_shared_tokenizer(base, _tokenizer(WORDS, ["<eos>", "<pad>"]))
    with pytest.raises(DistillationConfigError, match="vocabulary size"):
        check_shared_tokenizer(base, _tokenizer([*WORDS, "extra"], ["<eos>", "<pad>"]))
    with pytest.raises(DistillationConfigError, match="special tokens"):
        check_shared_tokenizer(base, _tokenizer(WORDS, ["<pad>", "<eos>"]))
    shuffled = [WORDS[1], WORDS[0], *WORDS[2:]]
    with pytest.raises(DistillationConfigError, match="encode the same text differently"):
        check_shared_tokenizer(base, _tokenizer(shuffled, ["<eos>", "<pad>"]))


# --- the noised student -------------------------------------------------------------------


def test_noise_checkpoint_perturbs_the_chosen_fraction_reproducibly(tiny_lm_path: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    report = noise_checkpoint(tiny_lm_path, tmp_path / "a", fraction=0.25, relative_std=0.5, seed=3)
    noise_checkpoint(tiny_lm_path, tmp_path / "b", fraction=0.25, relative_std=0.5, seed=3)
    noise_checkpoint(tiny_lm_path, tmp_path / "c", fraction=0.25, relative_std=0.5, seed=4)
    original = load_file(tiny_lm_path / "model.safetensors")
    a = load_file(tmp_path / "a" / "model.safetensors")
    b = load_file(tmp_path / "b" / "model.safetensors")
    c = load_file(tmp_path / "c" / "model.safetensors")
    changed = sum(int((a[k] != original[k]).sum()) for k in original)
    total = sum(v.numel() for v in original.values())
    assert 0.23 < changed / total < 0.27
    assert report.elements_noised == changed and report.elements_total == total
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)
    recorded = json.loads((tmp_path / "a" / "config.json").read_text())["omni_rl_noise"]
    assert recorded["fraction"] == 0.25 and recorded["seed"] == 3 and recorded["elements_noised"] == changed
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "a")  # still a loadable checkpoint
    assert torch.equal(model.lm_head.weight.detach(), a["lm_head.weight"])


def test_noise_checkpoint_errors(tiny_lm_path: Path, tmp_path: Path) -> None:
    with pytest.raises(FileExistsError, match="choose a new directory"):
        noise_checkpoint(tiny_lm_path, tmp_path)
    with pytest.raises(ValueError, match=r"fraction must be in \(0, 1\]"):
        noise_checkpoint(tiny_lm_path, tmp_path / "x", fraction=0.0)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="safe_serialization=True"):
        noise_checkpoint(tmp_path / "bin", tmp_path / "y")
