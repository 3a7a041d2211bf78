"""The tiny Qwen2.5-Omni (omni-qwen25) through the engines with no change outside its
package: the actor's log-probs see the audio, and `trainer` trains it on text, image, audio
and video rows with generation-time and recomputed log-probs agreeing for each modality."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from omni_contracts import get_training_adapter

ARCHITECTURE = "Qwen2_5OmniForConditionalGeneration"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_qwen25.tiny import build_tiny_qwen25_omni

    return build_tiny_qwen25_omni(tmp_path_factory.mktemp("tiny") / "qwen2.5-omni", seed=0)


def tone(hz: float, seconds: float = 1.0) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * hz * np.arange(int(16_000 * seconds)) / 16_000)).astype(np.float32)


@pytest.mark.slow
def test_actor_log_probs_change_when_the_audio_changes(tiny: Path) -> None:
    """The ids-are-right check: with a wrong audio token id the thinker silently drops the
    audio features, and two different tones give identical log-probs."""
    from omni_training.actor import Actor
    from omni_training.batching import MicroBatch, collate
    from omni_training.policy_loss import PolicyLossConfig
    from omni_training.settings import NO_LORA, ActorSettings, OptimizerSettings

    settings = ActorSettings(
        loss_mode="vanilla", policy_loss=PolicyLossConfig(loss_agg_mode="token-mean"), gradient_checkpointing=False
    )
    actor = Actor.from_pretrained(
        str(tiny), get_training_adapter(ARCHITECTURE, "thinker"),
        settings=settings, lora=NO_LORA, optim=OptimizerSettings(lr=1e-6),
    )
    processor = actor.adapter.configure_processor(str(tiny), actor.model_config)
    content = [{"type": "audio"}, {"type": "text", "text": "How many beeps?"}]
    text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False)
    rows = [dict(processor(text=[text], audio=[tone(hz)], return_tensors="pt")) for hz in (440.0, 1234.0)]
    assert torch.equal(rows[0]["input_ids"], rows[1]["input_ids"])  # only the audio differs
    response = torch.tensor(processor.tokenizer.encode("Three beeps."))
    model_inputs, responses, mask = collate(rows, [response, response], pad_token_id=processor.tokenizer.pad_token_id)
    (log_probs,) = actor.compute_log_probs([MicroBatch(model_inputs, responses, mask)])
    assert torch.isfinite(log_probs).all()
    assert (log_probs[0] - log_probs[1]).abs().max() > 1e-4


def write_rows(root: Path) -> Path:
    import soundfile as sf
    from PIL import Image

    from omni_data import rl_row, write_rl_parquet

    sys.path.insert(0, str(Path(__file__).parent))
    from test_data_qwen3_processor import write_mp4

    picture = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (56, 84, 3), dtype=np.uint8)).save(picture, format="PNG")
    sf.write(root / "tone.wav", tone(440.0), 16_000)

    def row(text: str, index: int, **media: Any) -> dict[str, Any]:
        return rl_row(
            data_source="openai/gsm8k", messages=[{"role": "user", "content": text}], ground_truth=str(index),
            ability="math", extra_info={"index": index, "split": "train"}, **media,
        )

    rows = [  # one modality per step: batch size 1, not shuffled
        row("What is 2 + 2?", 4),
        row("<image>How many apples?", 3, images=[{"bytes": picture.getvalue(), "path": "a.png"}]),
        row("<audio>How many beeps?", 1, audios=[str(root / "tone.wav")]),
        row("<video>What moves?", 2, videos=[write_mp4(root / "clip.mp4", frames=8, fps=4, size=56)]),
    ]
    return write_rl_parquet(rows, root / "train.parquet")


@pytest.mark.slow
def test_trainer_trains_the_tiny_model_per_modality(tiny: Path, tmp_path: Path) -> None:
    from omni_trainer.cli import main

    scorer = tmp_path / "scorer.py"
    # Rewards with variance inside every group (8 samples agreeing mod 7: ~1e-6), so each step
    # has a non-zero policy gradient.
    scorer.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    return (sum(map(ord, solution_str)) % 7) / 6\n"
    )
    run = tmp_path / "run"
    assert main([
        f"actor_rollout_ref.model.path={tiny}", f"data.train_files={write_rows(tmp_path)}",
        f"reward.custom_reward_function.path={scorer}", "reward.num_workers=1",
        "data.train_batch_size=1", "data.shuffle=false", "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1", "data.max_response_length=8",
        "actor_rollout_ref.actor.optim.lr=1e-2", "trainer.total_training_steps=4",
        "trainer.val_before_train=false", f"trainer.default_local_dir={run}",
    ]) == 0
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [step for step in steps if step["step"] >= 1]
    assert [step["step"] for step in steps] == [1.0, 2.0, 3.0, 4.0]  # text, image, audio, video
    for modality, step in zip(("text", "image", "audio", "video"), steps, strict=True):
        assert step["training/rollout_actor_probs_pearson_corr"] >= 0.999, modality
        assert step["actor/grad_norm"] > 0, modality


@pytest.mark.slow
def test_tiny_model_learns_the_builtin_task(tiny: Path, tmp_path: Path) -> None:
    """The embedded demo's task and settings (pictures and tones in every prompt, reward for
    answering with a number) on the tiny Qwen2.5-Omni: the reward rises from ~0 to ~1 (steps
    11-17 here, ~1 s a step). The LM head is a LoRA target, as in the embedded preset: from
    random weights the output layer has to move."""
    from omni_trainer.cli import main

    run = tmp_path / "run"
    assert main([
        f"actor_rollout_ref.model.path={tiny}", "data.train_batch_size=8", "data.max_response_length=4",
        "actor_rollout_ref.model.lora_rank=16", "actor_rollout_ref.model.lora_alpha=32",
        "actor_rollout_ref.model.target_modules=[q_proj,k_proj,v_proj,o_proj,lm_head]",
        "actor_rollout_ref.model.exclude_modules=.*(visual|audio_tower|talker|token2wav).*",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32", "actor_rollout_ref.actor.optim.lr=0.01",
        "actor_rollout_ref.rollout.n=8", "trainer.total_training_steps=30", "trainer.test_freq=0",
        "trainer.save_freq=0", "trainer.val_before_train=false", f"trainer.default_local_dir={run}",
    ]) == 0
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rewards = [step["critic/score/mean"] for step in steps if step["step"] >= 1]
    assert len(rewards) == 30
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last - first >= 0.5, rewards
    # Once the policy answers with certainty every sampled token's probability is 1: no
    # variance, and the Pearson is logged as undefined (None), as the step line says.
    pearsons = [step["training/rollout_actor_probs_pearson_corr"] for step in steps if step["step"] >= 1]
    defined = [value for value in pearsons if value is not None]
    assert len(defined) >= 20 and min(defined) >= 0.999, pearsons
