"""verl's whole loop with the production rollout, vLLM-Omni, on the CPU
(``trainer.engine=verl trainer.device=cpu actor_rollout_ref.rollout.name=vllm_omni``).

What runs is ``uv run trainer``'s code path in a process of its own: verl 0.9.1's task runner
on Ray, its FSDP2 actor on one gloo rank, and our vLLM-Omni server on vLLM's CPU build
(``vllm-cpu`` with ``omni_vllm_cpu``'s platform) taking the actor's weights after every update
through verl's own weight sync (shared memory on the CPU), validation after a sync,
checkpoints, and ``resume_mode=auto`` after the run is killed. Each step trains on an
image+audio row and a text row, in fp32 on both sides: the rollout's log-probs must equal the
actor's, which they do only if the engine serves exactly the weights the actor synced.
A second run covers the rest of the thinker's ground: merged LoRA, padded rows
(``use_remove_padding=false``), and video, image-only, audio-only and text rows. Metrics are
read from each run's verl ``file`` logger.
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


def image_audio_and_text_rows(root: Path) -> tuple[Path, Path]:
    """The built-in task's image+audio rows interleaved with text rows: with
    ``data.shuffle=false`` and batches of two, every step trains on both."""
    import pyarrow.parquet as pq

    from omni_data import rl_row, write_rl_parquet
    from omni_trainer.builtin_files import write_builtin_task
    from omni_trainer.builtin_task import DATA_SOURCE

    train, val = write_builtin_task(root, train_rows=4, val_rows=2, seed=0)
    texts = [
        rl_row(data_source=DATA_SOURCE, messages=[{"role": "user", "content": f"Give a number bigger than {i}."}],
               ground_truth=str(i + 1), ability="digits", extra_info={"split": "train", "index": 100 + i})
        for i in range(4)
    ]
    rows = [row for pair in zip(pq.read_table(train).to_pylist(), texts, strict=True) for row in pair]
    return write_rl_parquet(rows, root / "mixed.parquet"), val


def one_medium_rows(root: Path) -> Path:
    """A video row, an image-only row, an audio-only row and a text row: with
    ``data.shuffle=false`` and batches of two, two steps train on each once."""
    import io

    import soundfile as sf  # type: ignore[import-untyped]

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
    from test_data_qwen3_processor import write_mp4

    from omni_data import rl_row, write_rl_parquet
    from omni_trainer.builtin_task import DATA_SOURCE, builtin_rows

    root.mkdir(parents=True, exist_ok=True)
    picture_row, tone_row = builtin_rows(2, seed=3)
    png = io.BytesIO()
    picture_row["images"][0].save(png, format="PNG")
    tone = root / "tone.wav"
    sf.write(tone, tone_row["audios"][0], 16_000)
    clip = write_mp4(root / "clip.mp4", frames=4, fps=4, size=32)

    def row(index: int, content: str, ground_truth: str, **media: object) -> dict[str, object]:
        return rl_row(data_source=DATA_SOURCE, messages=[{"role": "user", "content": content}], ground_truth=ground_truth,
                      ability="digits", extra_info={"split": "train", "index": index}, **media)

    return write_rl_parquet([
        row(0, "<video>How many seconds is this clip?", "1", videos=[clip]),
        row(1, "<image>What colour is this?", "0", images=[{"bytes": png.getvalue(), "path": "picture.png"}]),
        row(2, "<audio>How many tones do you hear?", "1", audios=[str(tone)]),
        row(3, "Give a number bigger than 3.", "4"),
    ], root / "one_medium.parquet")


def assert_parity(steps: list[dict[str, float]]) -> None:
    """On every step the rollout's sampled-token log-probs equal the actor's while the actor moves."""
    for row in steps:
        assert row[PEARSON] >= 0.999, (row["step"], row[PEARSON])
        assert abs(row[LOG_PPL_DIFF]) <= 1e-4, (row["step"], row[LOG_PPL_DIFF])
        assert row["actor/grad_norm"] > 0, row  # the update moved the weights the next sync carries


def test_vllm_omni_samples_with_the_actors_weights_through_a_kill_and_resume(tmp_path: Path) -> None:
    """Three steps, checkpointed at each, killed after the first and resumed: on every step the
    rollout's sampled-token log-probs equal the actor's (Pearson >= 0.999, |log_ppl_diff| <= 1e-4;
    before the CPU MoE repacking, a synced model was 0.09 nats off), while the actor moves
    (an entropy bonus makes every update non-zero, so each sync carries new weights);
    validation after a sync sees no retryable engine error (the frontend multimodal cache
    left behind, which ended requests with no tokens); the resumed run continues at step 2."""
    pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed)")
    pytest.importorskip("omni_vllm_cpu", reason="needs the cpu-rollout extra (uv sync --extra cpu-rollout)")
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    train, val = image_audio_and_text_rows(tmp_path / "data")
    run_dir = tmp_path / "run"
    command = vllm_omni_run(
        build_tiny_qwen3_omni(), train, run_dir, f"data.val_files=[{val}]", "actor_rollout_ref.model.lora_rank=0",
        "trainer.save_freq=1", "trainer.test_freq=2",
    )
    log_path = tmp_path / "first.log"
    latest = run_dir / "latest_checkpointed_iteration.txt"
    run_and_kill_when(command, log_path, env=RUN_ENV, ready=lambda: (
        latest.is_file() and latest.read_text().strip() == "1" and bool(launches(run_dir)) and bool(launches(run_dir)[-1])
    ))

    second = subprocess.run(command, capture_output=True, text=True, timeout=600, env=RUN_ENV)
    log = log_path.read_text(errors="replace") + second.stdout + second.stderr
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    killed, resumed = launches(run_dir)
    assert [row["step"] for row in killed] == [1]
    assert [row["step"] for row in resumed] == [2, 3]  # from global_step_1
    assert "global_step_1" in second.stdout + second.stderr
    assert_parity(killed + resumed)
    validated = [row for row in resumed if any(key.startswith("val-core/") for key in row)]
    assert [row["step"] for row in validated] == [2, 3]  # test_freq=2, and verl's after the last step
    assert RETRY_LINE not in log and "cache miss" not in log.lower()


def test_vllm_omni_serves_a_merged_lora_student_and_the_teacher_on_padded_rows_of_each_medium(tmp_path: Path) -> None:
    """Padded rows (``use_remove_padding=false``) over a video, an image-only, an audio-only and a
    text row, each sampled with its media, by a LoRA student (rank 8, merged into the weights
    each sync sends) with on-policy distillation from a teacher vLLM-Omni serves too: the
    rollout's log-probs equal the actor's on both steps, the second sampled from the merged
    weights of the first update (rounded to bf16 on the way, as verl's own merged sync sends
    them, step 2 was 6.2e-4 off); the teacher is the student's checkpoint, so before that
    update its log-probs of each sample, media included, equal the student's."""
    pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed)")
    pytest.importorskip("omni_vllm_cpu", reason="needs the cpu-rollout extra (uv sync --extra cpu-rollout)")
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    run_dir = tmp_path / "run"
    command = vllm_omni_run(
        build_tiny_qwen3_omni(), one_medium_rows(tmp_path / "data"), run_dir, "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.use_remove_padding=false", "trainer.save_freq=0",
        "distillation.enabled=true", f"distillation.teacher_models.teacher_model.model_path={build_tiny_qwen3_omni()}",
        "distillation.nnodes=1", "distillation.n_gpus_per_node=1", "distillation.distillation_loss.loss_mode=kl",
        "distillation.distillation_loss.use_policy_gradient=true", steps=2,
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=RUN_ENV)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (steps,) = launches(run_dir)
    assert [row["step"] for row in steps] == [1, 2]
    assert_parity(steps)
    first, second = steps
    assert max(abs(first[DISTILL_MIN]), abs(first[DISTILL_MAX])) < 1e-4, first
    assert max(abs(second[DISTILL_MIN]), abs(second[DISTILL_MAX])) > 1e-4, second  # the student moved
    assert RETRY_LINE not in done.stdout + done.stderr
