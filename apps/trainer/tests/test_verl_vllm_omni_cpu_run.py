"""verl's whole loop with the production rollout, vLLM-Omni, on the CPU
(``trainer.engine=verl trainer.device=cpu actor_rollout_ref.rollout.name=vllm_omni``).

What runs is ``uv run trainer``'s code path in a process of its own: verl 0.9.1's task runner
on Ray, its FSDP2 actor on one gloo rank, and our vLLM-Omni server on vLLM's CPU build
(``vllm-cpu`` with ``omni_vllm_cpu``'s platform) taking the actor's weights after every update
through verl's own weight sync (shared memory on the CPU), validation after a sync,
checkpoints, and ``resume_mode=auto`` after the run is killed. Each step trains on an
image+audio row and a text row, in fp32 on both sides: the rollout's log-probs must equal the
actor's, which they do only if the engine serves exactly the weights the actor synced.
Metrics are read from the run's verl ``file`` logger.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verl_runs import launches, run_and_kill_when  # noqa: E402

pytestmark = pytest.mark.slow

PEARSON = "training/rollout_actor_probs_pearson_corr"
LOG_PPL_DIFF = "rollout_corr/log_ppl_diff"
RUN_ENV = {**os.environ, "RAY_DEDUP_LOGS": "0"}
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
    command = [
        sys.executable, "-m", "omni_trainer.cli",
        "trainer.engine=verl", "trainer.device=cpu", "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.rollout.name=vllm_omni",
        f"actor_rollout_ref.model.path={build_tiny_qwen3_omni()}", f"data.train_files=[{train}]",
        f"data.val_files=[{val}]", "data.shuffle=false",
        "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.n=2",
        "data.max_response_length=4", "actor_rollout_ref.model.lora_rank=0",
        # Large steps (Adam moves every weight by about lr), never zero (the entropy bonus): a
        # rollout left on older weights would be far more than 1e-4 nats off.
        "actor_rollout_ref.actor.optim.lr=3e-2", "actor_rollout_ref.actor.entropy_coeff=0.01",
        "trainer.total_training_steps=3", "trainer.save_freq=1", "trainer.val_before_train=false",
        "trainer.test_freq=2", f"trainer.default_local_dir={run_dir}",
    ]
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
    for row in killed + resumed:
        assert row[PEARSON] >= 0.999, (row["step"], row[PEARSON])
        assert abs(row[LOG_PPL_DIFF]) <= 1e-4, (row["step"], row[LOG_PPL_DIFF])
        assert row["actor/grad_norm"] > 0, row  # the update moved the weights the next sync carries
    validated = [row for row in resumed if any(key.startswith("val-core/") for key in row)]
    assert [row["step"] for row in validated] == [2, 3]  # test_freq=2, and verl's after the last step
    assert RETRY_LINE not in log and "cache miss" not in log.lower()
