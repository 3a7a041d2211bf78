"""`uv run trainer actor_rollout_ref.model.stage=talker`: the tiny Qwen3-Omni's talker trained
on the built-in speech task by the local engine, end to end, for a few steps (the full
120-step run, whose reward rises, is measured in the docs (Speech), not here)."""

from __future__ import annotations

import json
import wave
from pathlib import Path

import pytest
import torch
from omni_trainer.resolved import resolve_run

pytestmark = pytest.mark.slow

FROZEN = ("thinker.", "talker.code_predictor.", "code2wav.", "talker.text_projection.", "talker.hidden_projection.")


def test_talker_stage_trains_only_the_talker_and_writes_speech_samples(tmp_path: Path) -> None:
    from omni_trainer.config import load_config
    from omni_trainer.engines.local.trainer import LocalTrainer

    run = tmp_path / "run"
    config = load_config([
        "actor_rollout_ref.model.stage=talker", "trainer.total_training_steps=3", "trainer.save_freq=0",
        f"trainer.default_local_dir={run}",
    ])
    trainer = LocalTrainer(resolve_run(config))
    trainer.setup()
    model = trainer.actor.model
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer.fit()

    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1.0, 2.0, 3.0]
    for step in steps:
        # The rollout's codec-0 log-probs and the actor's teacher-forced ones agree.
        assert step["training/rollout_actor_probs_pearson_corr"] >= 0.999
        assert abs(step["rollout_corr/log_ppl_diff"]) < 1e-5
        assert 0.0 <= step["critic/score/mean"] <= 1.0 and step["speech/duration_s/mean"] > 0
        assert step["actor/grad_norm"] > 0
    after = dict(model.named_parameters())
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert not {name for name in changed if name.startswith(FROZEN)}  # bit-identical
    assert any(name.startswith("talker.model.") for name in changed)
    wavs = sorted((run / "samples").glob("*.wav"))
    assert {p.name.split("_")[1] for p in wavs} == {"000001", "000003"}
    with wave.open(str(wavs[0])) as wav:
        assert wav.getframerate() == trainer.task.sampler.policy.speech_sample_rate and wav.getnframes() > 0
    assert (run / "curve.png").exists()


def thinker_run_with_drift(tmp_path: Path, name: str, *extra: str) -> dict[float, dict[str, float]]:
    from omni_trainer.cli import main

    run = tmp_path / name
    scorer = tmp_path / "scorer.py"
    # Rewards with variance inside every group, so every step moves the thinker.
    scorer.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    return (sum(map(ord, solution_str)) % 7) / 6\n"
    )
    assert main([
        f"reward.custom_reward_function.path={scorer}", "reward.num_workers=1", "trainer.talker_drift=true",
        "actor_rollout_ref.actor.optim.lr=0.01", "trainer.total_training_steps=5", "trainer.test_freq=1",
        "trainer.save_freq=0", f"trainer.default_local_dir={run}", *extra,
    ]) == 0
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return {json.loads(line)["step"]: json.loads(line) for line in lines}


def test_thinker_run_reports_talker_drift_and_the_penalty_reduces_it(tmp_path: Path) -> None:
    """The embedded thinker run with ``trainer.talker_drift=true``: no drift before training
    (the probe's thinker is the policy's), some after updates of the thinker; the same run
    with the penalty in the thinker's loss drifts less. (Measured with the actor scoring the
    masked distribution it samples from: 6.8e-6 free, 2.4e-6 with coef 3000 after 5 steps,
    4.7e-6 with 1000; before that mask, 2.0e-5 free and 1.8e-6 with 1000.)

    At step 1's update the penalty is exactly 0 but its gradient is rounding noise, not 0
    (``q * sum(p) - p`` per logit at ``q == p``, times the coef), and AdamW's first step,
    ``g / (|g| + eps)`` per element, moves by up to lr the elements whose policy gradient is as
    small: the step-1 drifts differ by 0.4% here, 1.2% on a CI machine (each run is bitwise
    repeatable), while the gradient norms differ by 7e-8 relative."""
    free = thinker_run_with_drift(tmp_path, "free", "trainer.talker_drift_rewards=[{name: duration, weight: 1.0}]")
    assert free[0.0]["talker/drift_kl"] < 1e-9  # the same thinker: the same distributions
    for step in (0.0, 5.0):  # the probes spoken anew from the thinker being trained, scored
        spoken = free[step]["talker/probe/audio_reward/duration/mean"]
        assert 0.0 <= spoken <= 1.0 and free[step]["talker/probe/audio_reward/duration/errors"] == 0
    assert all(free[step]["actor/grad_norm"] > 0 for step in (1.0, 2.0, 3.0, 4.0, 5.0))
    assert free[5.0]["talker/drift_kl"] > 5e-6
    held = thinker_run_with_drift(tmp_path, "held", "actor_rollout_ref.actor.talker_drift_coef=3000")
    # Step 1: nothing to pull against yet (the probe's thinker is the policy's) ...
    assert held[1.0]["actor/talker_drift_penalty"] < 1e-9
    # ... so the penalty's gradient is noise beside the policy's: measured 7e-8 relative on the
    # norm; a pull of 0.5% of the policy gradient, even orthogonal, moves it by 1.25e-5.
    assert held[1.0]["actor/grad_norm"] == pytest.approx(free[1.0]["actor/grad_norm"], rel=1e-5)
    # ... and after Adam's step the drifts agree to well within the tenfold gap of step 5.
    assert held[1.0]["talker/drift_kl"] == pytest.approx(free[1.0]["talker/drift_kl"], rel=0.1)
    assert "actor/talker_drift_penalty" in held[2.0] and "actor/talker_drift_penalty" not in free[2.0]
    assert held[5.0]["talker/drift_kl"] < 0.5 * free[5.0]["talker/drift_kl"]


def speech_rows(tmp_path: Path) -> Path:
    """User rows in the RL schema with ``extra_info.spoken_text``; one picture + tone row,
    and one row without the text to speak (a bad row)."""
    import io

    import numpy as np
    from PIL import Image

    from omni_data.schema import rl_row, write_rl_parquet
    from omni_rewards.audio import encode_wav_pcm16

    tone = tmp_path / "tone.wav"
    tone.write_bytes(encode_wav_pcm16(0.5 * np.sin(np.arange(16_000) * 2 * np.pi * 440 / 16_000), 16_000))
    png = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(png, "PNG")

    def row(index: int, prompt: str, spoken: str | None, **media: object) -> dict[str, object]:
        extra = {"index": index} if spoken is None else {"index": index, "spoken_text": spoken}
        return rl_row(data_source="my/speech", messages=[{"role": "user", "content": prompt}], ground_truth=str(spoken),
                      ability="speech", extra_info=extra, **media)  # type: ignore[arg-type]

    rows = [
        row(0, "Say hello.", "Hello."),
        row(1, "<image><audio>Say what you hear.", "A tone.", images=[{"bytes": png.getvalue(), "path": "p.png"}],
            audios=[str(tone)]),
        row(2, "Say thanks.", "Thanks."),
        row(3, "Say nothing.", None),
        row(4, "Say yes.", "Yes."),
    ]
    return write_rl_parquet(rows, tmp_path / "speech.parquet")


def test_talker_trains_on_user_rows_with_configured_rewards_and_voice(tmp_path: Path) -> None:
    from omni_qwen3.tiny import build_tiny_qwen3_omni
    from omni_trainer.cli import main

    run = tmp_path / "run"
    assert main([
        f"actor_rollout_ref.model.path={build_tiny_qwen3_omni()}",
        "actor_rollout_ref.model.stage=talker", f"data.train_files=[{speech_rows(tmp_path)}]", "data.on_bad_row=skip",
        "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2",
        "data.max_response_length=8", "actor_rollout_ref.rollout.speaker=tiny", "actor_rollout_ref.model.lora_rank=0",
        "reward.audio_rewards=[{name: duration, weight: 1.0}, {name: silence, weight: 0.5}]",
        "trainer.total_training_steps=2", "trainer.save_freq=0", f"trainer.default_local_dir={run}",
    ]) == 0
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    for step in steps:
        assert step["data/dropped_rows"] == 1.0  # the row without spoken_text, counted
        assert step["training/rollout_actor_probs_pearson_corr"] >= 0.999
        assert {"audio_reward/duration/mean", "audio_reward/silence/mean"} <= step.keys()
        assert step["audio_reward/duration/errors"] == 0 and step["audio_reward/silence/errors"] == 0


def test_an_unknown_voice_is_refused_naming_the_checkpoints_voices(tmp_path: Path) -> None:
    from omni_trainer.config import load_config
    from omni_trainer.engines.local.trainer import LocalTrainer

    config = load_config([
        "actor_rollout_ref.model.stage=talker", "actor_rollout_ref.rollout.speaker=chelsie",
        f"trainer.default_local_dir={tmp_path / 'run'}",
    ])
    with pytest.raises(ValueError, match=r"speaker='chelsie' is not a voice of this checkpoint; its voices: tiny"):
        LocalTrainer(resolve_run(config)).setup()


def test_rows_without_spoken_text_speak_the_thinkers_greedy_answer(tmp_path: Path) -> None:
    from omni_qwen3.tiny import build_tiny_qwen3_omni
    from omni_trainer.config import load_config
    from omni_trainer.engines.local.trainer import LocalTrainer

    config = load_config([
        f"actor_rollout_ref.model.path={build_tiny_qwen3_omni()}", "actor_rollout_ref.model.stage=talker",
        f"data.train_files=[{speech_rows(tmp_path)}]", "data.spoken_text=thinker", "data.max_spoken_tokens=6",
        "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.rollout.n=2",
        "data.max_response_length=8", "actor_rollout_ref.model.lora_rank=0", "data.shuffle=false",
        "reward.audio_rewards=[{name: duration, weight: 1.0}]", "trainer.total_training_steps=1",
        f"trainer.default_local_dir={tmp_path / 'run'}",
    ])
    trainer = LocalTrainer(resolve_run(config))
    trainer.setup()
    assert trainer.train_rows.dropped == 0  # the row without spoken_text is fine here: the thinker answers it
    hello, unspoken = trainer.train_rows[0], trainer.train_rows[3]  # "Say hello." (spoken_text "Hello."), none
    for prepared in (hello, unspoken):
        assert prepared.extra_info is not None and prepared.extra_info["spoken_text"]
        spoken = trainer.tokenizer.decode(prepared.inputs["input_ids"][0])
        assert spoken.endswith(prepared.extra_info["spoken_text"]) and "<|im_start|>assistant\n" in spoken
    assert hello.extra_info is not None and hello.extra_info["spoken_text"] != "Hello."  # the thinker's words
    assert trainer.train_rows[3].extra_info == unspoken.extra_info  # found once, kept
    metrics = trainer.train_step(1, [hello, unspoken])
    assert metrics["training/rollout_actor_probs_pearson_corr"] >= 0.999
