"""verl's whole loop with the production rollout, vLLM-Omni, on the CPU
(``trainer.engine=verl trainer.device=cpu actor_rollout_ref.rollout.name=vllm_omni``).

What runs is ``uv run trainer``'s code path in a process of its own: verl 0.9.1's task runner
on Ray, its FSDP2 actor on one gloo rank, and our vLLM-Omni server on vLLM's CPU build
(``vllm-cpu`` with ``omni_vllm_cpu``'s platform) taking the actor's weights after every update
through verl's own weight sync (shared memory on the CPU), validation after a sync,
checkpoints, and ``resume_mode=auto`` after the run is killed. The actor is a LoRA student
(merged into the weights each sync sends) distilled on-policy from a teacher vLLM-Omni serves
too, in fp32 on both sides: the rollout's log-probs must equal the actor's, which they do only
if the engine serves exactly the weights the actor synced. The steps cover a video heard with its
soundtrack (``data.use_audio_in_video``, a clip whose sound ends before its frames: the positions
omni_qwen3's vLLM plugin corrects), image+audio, image-only, audio-only and text rows, padded (``use_remove_padding=false``) before the kill
and packed after it. Metrics are read from each launch's verl ``file`` logger.

One run, killed once, holds what took two (CI time: each launch starts Ray, verl's workers and
the engines, about two minutes on 2 cores, where a step takes seconds). The full fine-tune's
weight sync to vLLM-Omni is the talker run's (``test_verl_vllm_omni_talker_cpu_run.py``) and
the server's round trip (``tests/gpu/test_vllm_omni_rollout.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verl_runs import launches, run_and_kill_when, vllm_omni_run  # noqa: E402

pytestmark = pytest.mark.slow

PEARSON = "training/rollout_actor_probs_pearson_corr"
LOG_PPL_DIFF = "rollout_corr/log_ppl_diff"
DISTILL_MIN, DISTILL_MAX = "actor/distillation/loss_min", "actor/distillation/loss_max"
RUN_ENV = {**os.environ, "RAY_DEDUP_LOGS": "0", "OMNI_RL_VERL_LOG": "console"}  # the workers' output is read
RETRY_LINE = "vLLM-Omni returned a retryable error"
"""What the driver logs when the engine ends a request with its retryable error (the cache drift)."""


def every_medium_rows(root: Path) -> tuple[Path, Path]:
    """Train rows in the order the steps take them (``data.shuffle=false``, batches of two):
    step 1 an image+audio row and a video row heard with its soundtrack, step 2 an image-only and an audio-only row,
    step 3 a text row and an image+audio row; and the built-in task's validation rows."""
    import io

    import pyarrow.parquet as pq
    import soundfile as sf  # type: ignore[import-untyped]

    import numpy as np

    from omni_data import rl_row, write_rl_parquet
    from omni_data.builtin import write_builtin_task, write_clip
    from omni_data.builtin import DATA_SOURCE, builtin_rows

    train, val = write_builtin_task(root, train_rows=2, val_rows=2, seed=0)
    image_audio = pq.read_table(train).to_pylist()
    picture_row, tone_row = builtin_rows(2, seed=3)
    png = io.BytesIO()
    picture_row["images"][0].save(png, format="PNG")
    tone = root / "tone.wav"
    sf.write(tone, tone_row["audios"][0], 16_000)
    # 1 s of 2 frames, heard with a half-second tone: the block ends with audio tokens, which
    # upstream vLLM misplaces the text after (omni_qwen3.vllm_positions puts it back).
    beep = (0.3 * np.sin(2 * np.pi * 440 * np.arange(8_000) / 16_000)).astype(np.float32)
    clip = write_clip(root / "clip.mp4", [np.full((32, 32, 3), 60 * i, np.uint8) for i in range(2)], 2, beep[None],
                      16_000)

    def row(index: int, content: str, ground_truth: str, **media: object) -> dict[str, object]:
        return rl_row(data_source=DATA_SOURCE, messages=[{"role": "user", "content": content}],
                      ground_truth=ground_truth, ability="digits", extra_info={"split": "train", "index": index},
                      **media)

    rows = [
        image_audio[0], row(100, "<video>How many seconds is this clip?", "1", videos=[str(clip)]),
        row(101, "<image>What colour is this?", "0", images=[{"bytes": png.getvalue(), "path": "picture.png"}]),
        row(102, "<audio>How many tones do you hear?", "1", audios=[str(tone)]),
        row(103, "Give a number bigger than 3.", "4"), image_audio[1],
    ]
    return write_rl_parquet(rows, root / "every_medium.parquet"), val


def assert_parity(steps: list[dict[str, float]]) -> None:
    """On every step the rollout's sampled-token log-probs equal the actor's while the actor moves."""
    for row in steps:
        assert row[PEARSON] >= 0.999, (row["step"], row[PEARSON])
        assert abs(row[LOG_PPL_DIFF]) <= 1e-4, (row["step"], row[LOG_PPL_DIFF])
        assert row["actor/grad_norm"] > 0, row  # the update moved the weights the next sync carries


def test_vllm_omni_serves_a_merged_lora_student_and_its_teacher_through_a_kill_and_resume(tmp_path: Path) -> None:
    """Three steps, checkpointed at each; killed after the second and resumed with two settings
    changed (``trainer.resume_anyway``): packed rows, and no teacher. On every step the
    rollout's sampled-token log-probs equal the actor's (Pearson >= 0.999, |log_ppl_diff| <=
    1e-4; before the CPU MoE repacking, a synced model was 0.09 nats off; with verl's own merged
    sync, rounded to bf16, 6.2e-4), while the actor moves (an entropy bonus makes every update
    non-zero, so each sync carries new weights). The teacher is the student's checkpoint, so
    before the first update its log-probs of each sample, media included, equal the student's,
    and after it they do not. Validation after a sync sees no retryable engine error (the
    frontend multimodal cache left behind, which ended requests with no tokens). The resumed
    run continues at step 3, from the weights it saved."""
    pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed)")
    pytest.importorskip("omni_vllm_cpu", reason="needs the cpu-rollout extra (uv sync --extra cpu-rollout)")
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    model = build_tiny_qwen3_omni()
    train, val = every_medium_rows(tmp_path / "data")
    run_dir = tmp_path / "run"
    command = vllm_omni_run(model, train, run_dir, f"data.val_files=[{val}]", "actor_rollout_ref.model.lora_rank=8",
                            "trainer.save_freq=1", "trainer.test_freq=2", "data.use_audio_in_video=true")
    teacher = [
        "actor_rollout_ref.model.use_remove_padding=false",
        "distillation.enabled=true", f"distillation.teacher_models.teacher_model.model_path={model}",
        "distillation.nnodes=1", "distillation.n_gpus_per_node=1", "distillation.distillation_loss.loss_mode=kl",
        "distillation.distillation_loss.use_policy_gradient=true",
    ]
    log_path = tmp_path / "first.log"
    latest = run_dir / "latest_checkpointed_iteration.txt"
    run_and_kill_when([*command, *teacher], log_path, env=RUN_ENV, ready=lambda: (
        latest.is_file() and latest.read_text().strip() == "2"
        and bool(launches(run_dir)) and [row["step"] for row in launches(run_dir)[-1]] == [1, 2]
    ))

    # Changed settings, which a resume takes only when told so: a user turning the teacher off.
    resume = [*command, "actor_rollout_ref.model.use_remove_padding=true", "trainer.resume_anyway=true"]
    second = subprocess.run(resume, capture_output=True, text=True, timeout=600, env=RUN_ENV)
    log = log_path.read_text(errors="replace") + second.stdout + second.stderr
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    killed, resumed = launches(run_dir)
    assert [row["step"] for row in killed] == [1, 2]
    assert [row["step"] for row in resumed] == [3]  # from global_step_2
    assert "global_step_2" in second.stdout + second.stderr
    assert_parity(killed + resumed)
    first, second_step = killed
    assert max(abs(first[DISTILL_MIN]), abs(first[DISTILL_MAX])) < 1e-4, first
    assert max(abs(second_step[DISTILL_MIN]), abs(second_step[DISTILL_MAX])) > 1e-4, second_step  # the student moved
    assert DISTILL_MIN not in resumed[0]  # the teacher is off after the resume
    validated = [row["step"] for row in killed + resumed if any(key.startswith("val-core/") for key in row)]
    assert validated == [2, 3]  # test_freq=2, and verl's after the last step
    assert RETRY_LINE not in log and "cache miss" not in log.lower()
