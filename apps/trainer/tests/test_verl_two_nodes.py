"""verl on the CPU across two Ray nodes: one training rank on each (``trainer.nnodes=2``).

Ray's ``cluster_utils.Cluster`` starts two raylets on this machine, each offering one rank
slot; the trainer attaches to it (``ray_kwargs.ray_init.address``) as it would to a cluster
started with ``ray start``. verl's resource pool then places one FSDP rank, and the
``omni_local`` replica that serves it, on each node; the two ranks shard the actor over gloo.
The rows are videos (with a text row), the modality the two-rank run in
``test_verl_cpu_run`` does not cover.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
PEARSON = "training/rollout_actor_probs_pearson_corr"


def write_video_rows(root: Path) -> Path:
    sys.path.insert(0, str(HERE.parents[2] / "tests"))
    from test_data_qwen3_processor import write_mp4

    from omni_data import rl_row, write_rl_parquet
    from omni_trainer.builtin_task import DATA_SOURCE

    clips = [write_mp4(root / f"clip{i}.mp4", frames=4 + 2 * i, fps=4, size=32 + 16 * i) for i in range(3)]
    rows = [
        rl_row(
            data_source=DATA_SOURCE, messages=[{"role": "user", "content": f"<video>How many seconds is this clip? Answer with digits. ({i})"}],
            ground_truth=str(1 + i), ability="digits", extra_info={"split": "train", "index": i}, videos=[clip],
        )
        for i, clip in enumerate(clips)
    ]
    rows.append(rl_row(
        data_source=DATA_SOURCE, messages=[{"role": "user", "content": "What is two plus two? Answer with digits."}],
        ground_truth="4", ability="digits", extra_info={"split": "train", "index": 3},
    ))
    return write_rl_parquet(rows, root / "videos.parquet")


def test_one_rank_on_each_of_two_ray_nodes(tmp_path: Path) -> None:
    from ray.cluster_utils import Cluster

    from omni_qwen3.tiny import build_tiny_qwen3_omni

    tiny = str(build_tiny_qwen3_omni())
    data = write_video_rows(tmp_path)
    run_dir = tmp_path / "run"
    # Each node: one rank slot (Ray's GPU resource, logical on the CPU) and scheduling slots
    # for verl's actors (the CPU counts are logical too).
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 32, "num_gpus": 1})
    try:
        cluster.add_node(num_cpus=32, num_gpus=1)
        cluster.wait_for_nodes()
        command = [
            sys.executable, "-m", "omni_trainer.cli",
            "trainer.engine=verl", "trainer.device=cpu", "trainer.nnodes=2", "trainer.n_gpus_per_node=1",
            f"ray_kwargs.ray_init.address={cluster.address}",
            f"actor_rollout_ref.model.path={tiny}", f"data.train_files=[{data}]", f"data.val_files=[{data}]",
            "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "actor_rollout_ref.rollout.n=2",
            "data.max_response_length=4", "actor_rollout_ref.model.lora_rank=0", "actor_rollout_ref.actor.optim.lr=1e-3",
            "trainer.total_training_steps=2", "trainer.save_freq=2", "trainer.val_before_train=false",
            "trainer.test_freq=-1", f"trainer.default_local_dir={run_dir}",
        ]
        run = subprocess.run(command, capture_output=True, text=True, timeout=900, env={**os.environ, "RAY_DEDUP_LOGS": "0"})
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
        placement = node_of_each_rank(cluster.address)
    finally:
        cluster.shutdown()

    (metrics,) = (run_dir / "metrics").glob("verl-*.jsonl")
    steps = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [{"step": r["step"], **r["data"]} for r in steps if "training/global_step" in r["data"]]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        assert row[PEARSON] >= 0.999, (row["step"], row[PEARSON])
    # The actor's two shards (one per rank) were written by the two nodes' ranks.
    actor = run_dir / "global_step_2" / "actor"
    assert sorted(p.name for p in actor.glob("model_world_size_2_rank_*.pt")) == [
        "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"
    ]
    # One rank and one rollout server on each node.
    assert len(placement["ranks"]) == 2 and len(set(placement["ranks"])) == 2, placement
    assert len(placement["servers"]) == 2 and set(placement["servers"]) == set(placement["ranks"]), placement


def node_of_each_rank(address: str) -> dict[str, Any]:
    """The nodes the run's actor ranks and ``omni_local`` servers ran on, from Ray's state API
    (finished actors stay listed while the cluster lives)."""
    script = (
        "import json, ray\n"
        "from ray.util.state import list_actors\n"
        f"ray.init(address={address!r}, log_to_driver=False)\n"
        "actors = list_actors(limit=10000, detail=True)\n"
        "ranks = [a.node_id for a in actors if 'WorkerDict' in a.class_name or 'ActorRollout' in a.class_name]\n"
        "servers = [a.node_id for a in actors if a.class_name == 'LocalRolloutServer']\n"
        "print(json.dumps({'ranks': ranks, 'servers': servers, 'classes': sorted({a.class_name for a in actors})}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result
