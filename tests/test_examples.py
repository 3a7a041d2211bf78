"""Each recipe script in examples/ runs end to end on CPU for two steps: synthetic files in
the recipe's raw format -> the converter -> the script (the tiny Qwen3-Omni or, for the
qwen25_* scripts, the tiny Qwen2.5-Omni; shrunk sizes)."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import subprocess
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from omni_data.convert.cli import main as convert

ROOT = Path(__file__).resolve().parents[1]
TINY_MODE = [
    "data.train_batch_size=2", "data.val_batch_size=2", "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "data.max_response_length=4", "data.max_prompt_length=4096", "actor_rollout_ref.model.lora_rank=4",
    "trainer.total_training_steps=2", "trainer.test_freq=0", "trainer.save_freq=0", "reward.num_workers=1",
]
LOCAL_ON_CPU = (
    "trainer.engine=local", "actor_rollout_ref.actor.fsdp_config.param_offload=false",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
)
"""After a Qwen3-Omni script (verl on 4 x 80 GB GPUs, the actor offloaded): the local engine,
which keeps its actor on its one device ("$@" wins)."""


def png(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (48, 48, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def wav(path: Path, seconds: float = 0.5, hz: float = 440.0) -> None:
    samples = (0.3 * np.sin(2 * np.pi * hz * np.arange(int(16_000 * seconds)) / 16_000) * 32767).astype(np.int16)
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(16_000)
        handle.writeframes(samples.tobytes())


def raw_gsm8k(directory: Path) -> None:
    for split in ("train", "test"):
        lines = [{"question": f"Tom has {i} apples and buys {i + 2}. How many now?",
                  "answer": f"{i} + {i + 2} = {2 * i + 2}\n#### {2 * i + 2}"} for i in range(4)]
        (directory / f"{split}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def raw_mmk12(directory: Path) -> None:
    for split in ("train", "test"):
        rows = {
            "id": [f"{split}-{i}" for i in range(4)],
            "question": ["What is the area of the square? A. 4 B. 9 C. 16 D. 25", "Compute x.",
                         "Which angle is larger? A. 30° B. 60°", "How many sides?"],
            "answer": ["C", "\\frac{1}{2}", "B", "4"],
            "subject": ["math"] * 4,
            "image": [{"bytes": png(i), "path": f"{i}.png"} for i in range(4)],
        }
        pq.write_table(pa.table(rows), directory / f"{split}-00000-of-00001.parquet")


def raw_avqa(directory: Path) -> None:
    media = directory / "media"
    media.mkdir()
    for k, split in enumerate(("train", "validation")):
        records = []
        for i in range(4):
            # Distinct media per row: the converter's strict split drops train rows whose
            # picture or sound also appears in validation.
            (media / f"{split}{i}.png").write_bytes(png(100 * k + i))
            wav(media / f"{split}{i}.wav", hz=220.0 + 40 * (4 * k + i))
            records.append({
                "problem": "What makes the sound in the picture?", "data_type": "image_audio",
                "options": ["A. a dog", "B. a car", "C. a bell", "D. rain"], "solution": "<answer>C</answer>",
                "path": {"image": f"media/{split}{i}.png", "audio": f"media/{split}{i}.wav"},
                "problem_id": f"{split}{i}", "problem_type": "which",
            })
        (directory / f"{split}.json").write_text(json.dumps(records))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_qwen3.tiny import build_tiny_qwen3_omni

    return build_tiny_qwen3_omni(tmp_path_factory.mktemp("tiny") / "ckpt")


@pytest.fixture(scope="module")
def tiny_qwen25(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from omni_qwen25.tiny import build_tiny_qwen25_omni

    return build_tiny_qwen25_omni(tmp_path_factory.mktemp("tiny") / "qwen2.5-omni")


def run_recipe(
    tmp_path: Path, model: Path, script: str, recipe: str, make_raw: object, val_split: str, scorer_metric: str,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Convert synthetic raw files, run the script for two steps and check its metrics;
    returns the run's resolved config."""
    raw, data, run = tmp_path / "raw", tmp_path / "data", tmp_path / "run"
    raw.mkdir()
    make_raw(raw)  # type: ignore[operator]
    assert convert([recipe, "--input", str(raw), "--output-dir", str(data)]) == 0
    uv = shutil.which("uv")
    assert uv is not None, "the example scripts run through uv"
    env = {**os.environ, "MODEL_PATH": str(model), "TRAIN_FILE": str(data / "train.parquet"),
           "VAL_FILE": str(data / f"{val_split}.parquet"), "UV_PYTHON_DOWNLOADS": "never"}
    done = subprocess.run(
        ["bash", str(ROOT / "examples" / script), *TINY_MODE, *extra, f"trainer.default_local_dir={run}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # Step 0 is the validation before training (verl's val_before_train), then the two steps.
    assert [row["step"] for row in rows] == [0.0, 1.0, 2.0]
    assert any(key.startswith("val-core/") for key in rows[0]), rows[0]
    rows = rows[1:]
    for row in rows:
        for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", scorer_metric):
            assert isinstance(row[key], float) and math.isfinite(row[key]), (key, row.get(key))
        # Rollout log-probs (gsm8k: several prompts per left-padded generate call) agree with the actor's.
        assert row["training/rollout_actor_probs_pearson_corr"] > 0.99, row["training/rollout_actor_probs_pearson_corr"]
    import yaml

    config: dict[str, Any] = yaml.safe_load((run / "config.yaml").read_text())
    actor_rollout_ref = config["actor_rollout_ref"]
    assert actor_rollout_ref["model"]["lora_rank"] == 4 and actor_rollout_ref["rollout"]["n"] == 2  # "$@" wins
    return config


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "recipe", "make_raw", "val_split", "scorer_metric"),
    [
        ("gsm8k_gspo_lora.sh", "gsm8k", raw_gsm8k, "test", "reward/openai/gsm8k/score/mean"),
        ("mmk12_gspo_lora.sh", "mmk12", raw_mmk12, "test", "reward/mmk12/format_reward/mean"),
        ("avqa_gspo_lora.sh", "avqa", raw_avqa, "validation", "reward/avqa_r1_6k/score/mean"),
    ],
)
def test_recipe_runs_in_tiny_cpu_mode(
    tmp_path: Path, tiny: Path, script: str, recipe: str, make_raw: object, val_split: str, scorer_metric: str
) -> None:
    config = run_recipe(tmp_path, tiny, script, recipe, make_raw, val_split, scorer_metric, extra=LOCAL_ON_CPU)
    assert config["trainer"]["experiment_name"] == f"qwen3_omni_{recipe}_gspo_lora"  # the script's setting
    assert config["actor_rollout_ref"]["rollout"]["tensor_model_parallel_size"] == 2  # verl's settings kept


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "recipe", "make_raw", "val_split", "scorer_metric"),
    [
        ("qwen25_mmk12_gspo_lora.sh", "mmk12", raw_mmk12, "test", "reward/mmk12/format_reward/mean"),
        ("qwen25_avqa_gspo_lora.sh", "avqa", raw_avqa, "validation", "reward/avqa_r1_6k/score/mean"),
    ],
)
def test_qwen25_recipe_runs_in_tiny_cpu_mode(
    tmp_path: Path, tiny_qwen25: Path, script: str, recipe: str, make_raw: object, val_split: str,
    scorer_metric: str,
) -> None:
    """The Qwen2.5-Omni scripts target verl on one GPU; trainer.engine=local after them ("$@"
    wins) runs the same recipe here on the tiny Qwen2.5-Omni."""
    config = run_recipe(
        tmp_path, tiny_qwen25, script, recipe, make_raw, val_split, scorer_metric, extra=("trainer.engine=local",)
    )
    assert config["trainer"]["experiment_name"] == f"qwen2_5_omni_{recipe}_gspo_lora"  # the script's setting
    assert config["actor_rollout_ref"]["rollout"]["pipeline_name"] == "qwen2_5_omni"
    assert config["trainer"]["engine"] == "local"


@pytest.mark.slow
def test_opd_recipe_runs_in_tiny_cpu_mode(tmp_path: Path, tiny: Path) -> None:
    """examples/mmk12_opd_lora.sh targets verl on two nodes; with trainer.engine=local after
    it ("$@" wins) the same recipe runs here: the tiny model teaches its noised copy."""
    from omni_training.noise import main as noise

    raw, data, run, student = tmp_path / "raw", tmp_path / "data", tmp_path / "run", tmp_path / "student"
    raw.mkdir()
    raw_mmk12(raw)
    assert convert(["mmk12", "--input", str(raw), "--output-dir", str(data)]) == 0
    assert noise(["--src", str(tiny), "--out", str(student), "--fraction", "0.25", "--seed", "0"]) == 0
    env = {**os.environ, "MODEL_PATH": str(student), "TEACHER_PATH": str(tiny), "UV_PYTHON_DOWNLOADS": "never",
           "TRAIN_FILE": str(data / "train.parquet"), "VAL_FILE": str(data / "test.parquet")}
    done = subprocess.run(
        ["bash", str(ROOT / "examples" / "mmk12_opd_lora.sh"), *TINY_MODE, *LOCAL_ON_CPU,
         f"trainer.default_local_dir={run}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0.0, 1.0, 2.0]  # validation before training, two steps
    for row in rows[1:]:
        distill = {key: value for key, value in row.items() if "distill" in key}
        assert distill and all(isinstance(v, float) and math.isfinite(v) for v in distill.values()), row
    import yaml

    config = yaml.safe_load((run / "config.yaml").read_text())
    distillation = config["distillation"]
    assert distillation["enabled"] and distillation["teacher_models"]["teacher_model"]["model_path"] == str(tiny)
    assert distillation["distillation_loss"]["loss_mode"] == "kl" and config["trainer"]["engine"] == "local"
