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
LOCAL_ON_CPU = {"ENGINE": "local"}
"""The scripts target verl on GPUs; ENGINE=local runs them on the local engine, leaving out
their verl-only keys (which the local engine would refuse)."""
SCRIPTS = ("gsm8k_gspo_lora.sh", "mmk12_gspo_lora.sh", "avqa_gspo_lora.sh", "mmk12_opd_lora.sh",
           "qwen25_mmk12_gspo_lora.sh", "qwen25_avqa_gspo_lora.sh", "qwen3_omni_dpo_lora.sh",
           "gsm8k_gspo_lora_one_step_off.sh", "gsm8k_gspo_lora_fully_async.sh", "geometry3k_gspo.sh",
           "audiomcq_gspo.sh", "nextqa_gspo.sh", "avqa_video_gspo.sh", "omnivideo_qi_gspo.sh")


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
            # Distinct media per row, so the rows stay apart also under the converter's
            # --strict-split (train rows whose picture or sound appears in validation).
            (media / f"{split}{i}.png").write_bytes(png(100 * k + i))
            wav(media / f"{split}{i}.wav", hz=220.0 + 40 * (4 * k + i))
            records.append({
                "problem": "What makes the sound in the picture?", "data_type": "image_audio",
                "options": ["A. a dog", "B. a car", "C. a bell", "D. rain"], "solution": "<answer>C</answer>",
                "path": {"image": f"media/{split}{i}.png", "audio": f"media/{split}{i}.wav"},
                "problem_id": f"{split}{i}", "problem_type": "which",
            })
        (directory / f"{split}.json").write_text(json.dumps(records))


def raw_geometry3k(directory: Path) -> None:
    """hiyouga/geometry3k as downloaded: data/<split>-00000-of-00001.parquet, images inline."""
    (directory / "data").mkdir()
    for k, split in enumerate(("train", "validation", "test")):
        rows = {
            "images": [[{"bytes": png(10 * k + i), "path": f"{i}.png"}] for i in range(4)],
            "problem": ["<image>Find x.", "<image>Find the area of the triangle.", "<image>Find y. Round to the "
                        "nearest tenth.", "<image>Find m \\angle 2."],
            "answer": ["3", "24", "7.5", "34"],
        }
        pq.write_table(pa.table(rows), directory / "data" / f"{split}-00000-of-00001.parquet")


def raw_audiomcq(directory: Path) -> None:
    """An AudioMCQ JSONL (question, choices, answer, audio_path) and its audio files."""
    (directory / "audio").mkdir()
    records = []
    for i in range(8):
        wav(directory / "audio" / f"clip{i}.wav", hz=220.0 + 40 * i)
        records.append({"id": f"q{i}", "question": "What makes this sound?", "audio_path": f"audio/clip{i}.wav",
                        "choices": ["a bell", "a dog", "rain", "a car"], "answer": "a bell",
                        "source_dataset": "synthetic"})
    (directory / "records.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))


def raw_nextqa(directory: Path) -> None:
    """TinyLLaVA-Video-R1's NExT-QA: nextqa_0-30s.jsonl and the clips under NextQA/ (each 1 s
    at 4 fps, with a tone as its soundtrack)."""
    from omni_data.builtin import write_clip

    problem = ("What does the man do after he stands up?\nA. He sits down.\nB. He waves.\nC. He runs away.\n"
               "D. He jumps.\nE. He laughs.")
    records = []
    for i in range(6):
        clip = Path("NextQA") / "NExTVideo" / f"{i:04d}.mp4"
        (directory / clip).parent.mkdir(parents=True, exist_ok=True)
        tone = (0.3 * np.sin(2 * np.pi * (220 + 40 * i) * np.arange(16_000) / 16_000)).astype(np.float32)
        write_clip(directory / clip, [np.full((32, 32, 3), 40 * i, np.uint8)] * 4, 4, tone[None], 16_000)
        records.append({"problem_id": i, "problem": problem, "data_type": "video", "problem_type": ["temporal"],
                        "solution": f"<answer>{'ABCDE'[i % 5]}</answer>", "video_filename": f"./{clip}"})
    (directory / "nextqa_0-30s.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))


def raw_avqa_video(directory: Path) -> None:
    """AVQA's original release: train_qa.json, val_qa.json and the clips (each 1 s at 4 fps,
    with a tone as its soundtrack)."""
    from omni_data.builtin import write_clip

    (directory / "videos").mkdir()
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "val": []}
    for i in range(6):
        tone = (0.3 * np.sin(2 * np.pi * (220 + 40 * i) * np.arange(16_000) / 16_000)).astype(np.float32)
        write_clip(directory / "videos" / f"clip{i}.mp4", [np.full((32, 32, 3), 40 * i, np.uint8)] * 4, 4,
                   tone[None], 16_000)
        splits["val" if i >= 4 else "train"].append({
            "id": i, "video_id": i, "video_name": f"clip{i}", "question_text": "Which instrument plays?",
            "multi_choice": ["piano", "violin", "drum", "flute"], "answer": i % 4, "question_relation": "Both",
            "question_type": "Which"})
    for split, records in splits.items():
        (directory / f"{split}_qa.json").write_text(json.dumps(records))


def raw_omnivideo_qi(directory: Path) -> None:
    """OmniVideo-R1's QI release: merged_train_all_qi.jsonl (multiple-choice and open rows) and
    its clips under ./data (each 2 s at 4 fps, with a tone as its soundtrack)."""
    from omni_data.builtin import write_clip

    records = []
    for i in range(6):
        clip = Path("data") / "LLaVA-Video-178K" / f"clip{i}.mp4"
        (directory / clip).parent.mkdir(parents=True, exist_ok=True)
        tone = (0.3 * np.sin(2 * np.pi * (220 + 40 * i) * np.arange(32_000) / 16_000)).astype(np.float32)
        write_clip(directory / clip, [np.full((32, 32, 3), 40 * i, np.uint8)] * 8, 4, tone[None], 16_000)
        choice = i % 3 == 0
        records.append({
            "id": f"qi{i}", "Type": "0_30_s_nextqa_mc_qa_processed" if choice else "0_30_s_nextqa_oe_qa_processed",
            "problem": "<video><audio>\nWhat opens?" + ("\nA. A window\nB. A door" if choice else ""),
            "solution": "B. A door" if choice else "a door", "videos": [f"./{clip}"],
            "audios": [f"./data/audios/clip{i}.mp3"], "data_source": "0_30_s_nextqa"})
    (directory / "merged_train_all_qi.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))


def script_overrides(script: str, tmp_path: Path, **env: str) -> list[str]:
    """What ``script`` passes to ``uv run trainer`` (a stand-in ``uv`` on PATH prints it)."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "uv").write_text('#!/usr/bin/env bash\nshift 2\nprintf "%s\\n" "$@"\n')
    (fake / "uv").chmod(0o755)
    environment = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "MODEL_PATH": "/m", "TEACHER_PATH": "/t",
                   "TRAIN_FILE": "/d/train.parquet", "VAL_FILE": "/d/val.parquet", **env}
    if "ENGINE" not in env:
        environment.pop("ENGINE", None)
    done = subprocess.run(["bash", str(ROOT / "examples" / script)], env=environment, capture_output=True, text=True,
                          check=True)
    return done.stdout.splitlines()


@pytest.mark.parametrize("script", SCRIPTS)
def test_engine_local_leaves_out_the_keys_the_local_engine_refuses(script: str, tmp_path: Path) -> None:
    """A script's verl-only keys (placement, offload, vLLM-Omni sizing) are left out with
    ENGINE=local, so nothing is refused; by default the script runs the verl engine with them."""
    from omni_trainer.config import load_config
    from omni_trainer.engines.local.verl_keys import local_refusals, verl_key

    local = load_config(script_overrides(script, tmp_path, **LOCAL_ON_CPU))
    assert local.trainer.engine == "local"
    assert local_refusals(local) == []
    verl = load_config(script_overrides(script, tmp_path))
    assert verl.trainer.engine == "verl"
    assert {key for key in verl.given_keys if verl_key(key)} - set(local.given_keys)  # the sizing is there


def test_the_one_step_off_script_runs_verls_one_step_off_trainer_on_a_pool_of_its_own(tmp_path: Path) -> None:
    """examples/gsm8k_gspo_lora_one_step_off.sh: on verl, the one-step-off trainer with the
    rollout on 4 GPUs of its own and NCCL weight sync, nothing refused."""
    from omni_trainer.config import load_config
    from omni_trainer.engines.verl.async_training import async_training_values, is_one_step_off
    from omni_trainer.engines.verl.translate import config_problems

    config = load_config(script_overrides("gsm8k_gspo_lora_one_step_off.sh", tmp_path))
    assert config_problems(config) == [] and is_one_step_off(config)
    values = async_training_values(config)
    assert values["actor_rollout_ref.rollout.n_gpus_per_node"] == 4 and values["actor_rollout_ref.hybrid_engine"] is False
    assert values["actor_rollout_ref.rollout.checkpoint_engine.backend"] == "nccl"


def test_the_fully_async_script_runs_verls_fully_async_trainer_with_verl_omnis_knobs(tmp_path: Path) -> None:
    """examples/gsm8k_gspo_lora_fully_async.sh: on verl, the fully-async trainer with verl-omni's
    knobs (a sync every 4 steps, 10% ahead, partial rollout), one mini-batch a step, the bound
    they imply stated, nothing refused."""
    from omni_trainer.config import load_config
    from omni_trainer.engines.verl.async_training import async_training_values, is_fully_async, worst_staleness
    from omni_trainer.engines.verl.translate import config_problems

    config = load_config(script_overrides("gsm8k_gspo_lora_fully_async.sh", tmp_path))
    assert config_problems(config) == [] and is_fully_async(config) and worst_staleness(config) == 8
    values = async_training_values(config)
    assert values["async_training.trigger_parameter_sync_step"] == 4 and values["async_training.staleness_threshold"] == 0.1
    assert values["async_training.require_batches"] == 1 and values["async_training.partial_rollout"] is True
    assert values["data.train_batch_size"] == 0 and values["actor_rollout_ref.rollout.n_gpus_per_node"] == 4


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
    *, convert_flags: tuple[str, ...] = (), lora: bool = True, env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Convert synthetic raw files (``convert_flags``: the converter's input flags, ``{raw}`` for
    the raw directory; by default ``--input {raw}``), run the script for two steps and check its
    metrics; ``lora`` false keeps the script's full fine-tune. Returns the run's resolved config."""
    raw, data, run = tmp_path / "raw", tmp_path / "data", tmp_path / "run"
    raw.mkdir()
    make_raw(raw)  # type: ignore[operator]
    flags = [flag.replace("{raw}", str(raw)) for flag in convert_flags or ("--input", "{raw}")]
    assert convert([recipe, *flags, "--output-dir", str(data)]) == 0
    uv = shutil.which("uv")
    assert uv is not None, "the example scripts run through uv"
    env = {**os.environ, "MODEL_PATH": str(model), "TRAIN_FILE": str(data / "train.parquet"),
           "VAL_FILE": str(data / f"{val_split}.parquet"), "UV_PYTHON_DOWNLOADS": "never", **LOCAL_ON_CPU, **(env or {})}
    tiny_mode = TINY_MODE if lora else [o for o in TINY_MODE if not o.startswith("actor_rollout_ref.model.lora_rank")]
    done = subprocess.run(
        ["bash", str(ROOT / "examples" / script), *tiny_mode, f"trainer.default_local_dir={run}"],
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
    assert actor_rollout_ref["model"]["lora_rank"] == (4 if lora else 0) and actor_rollout_ref["rollout"]["n"] == 2
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
    config = run_recipe(tmp_path, tiny, script, recipe, make_raw, val_split, scorer_metric)
    assert config["trainer"]["experiment_name"] == f"qwen3_omni_{recipe}_gspo_lora"  # the script's setting
    assert config["trainer"]["engine"] == "local"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "recipe", "make_raw", "val_split", "scorer_metric", "convert_flags"),
    [
        ("geometry3k_gspo.sh", "geometry3k", raw_geometry3k, "test", "reward/hiyouga/geometry3k/format/mean", ()),
        ("audiomcq_gspo.sh", "audiomcq", raw_audiomcq, "validation",
         "reward/Harland/AudioMCQ-StrongAC-GeminiCoT/format_valid/mean",
         ("--input", "{raw}/records.jsonl", "--audio-root", "{raw}", "--validation-size", "2")),
        ("nextqa_gspo.sh", "nextqa", raw_nextqa, "validation", "reward/nextqa/score/mean",
         ("--input", "{raw}", "--validation-ratio", "0.34")),
        ("avqa_video_gspo.sh", "avqa_video", raw_avqa_video, "validation", "reward/avqa_video/score/mean",
         ("--train-json", "{raw}/train_qa.json", "--validation-json", "{raw}/val_qa.json", "--video-root",
          "{raw}/videos")),
    ],
)
def test_full_fine_tune_recipe_runs_in_tiny_cpu_mode(
    tmp_path: Path, tiny: Path, script: str, recipe: str, make_raw: object, val_split: str, scorer_metric: str,
    convert_flags: tuple[str, ...],
) -> None:
    """verl-omni's full-parameter recipes: the tiny model's language model trains whole (the
    towers frozen), scored by the recipe's scorer (AudioMCQ's ground truth is a mapping)."""
    config = run_recipe(tmp_path, tiny, script, recipe, make_raw, val_split, scorer_metric,
                        convert_flags=convert_flags, lora=False)
    assert config["trainer"]["experiment_name"] == f"qwen3_omni_{recipe}_gspo"  # the script's setting
    assert config["trainer"]["engine"] == "local"
    assert config["data"]["use_audio_in_video"] is (recipe == "nextqa")  # NExT-QA hears its videos, as verl-omni
    assert config["data"]["soundtrack_as_audio"] is (recipe == "avqa_video")  # as verl-omni's NextQARLHFDataset


@pytest.mark.slow
def test_the_omnivideo_qi_recipe_runs_with_its_judge_in_tiny_cpu_mode(tmp_path: Path, tiny: Path) -> None:
    """examples/omnivideo_qi_gspo.sh: videos heard with their soundtracks, paid by the judged QI
    reward (omni_rewards.scorers.omnivideo_qi_judge) with the tiny QI judge served in-process;
    the open rows' answers are the judge's to score, and none of its answers failed."""
    from omni_trainer.builtin_files import qi_judge

    judge = qi_judge()
    config = run_recipe(
        tmp_path, tiny, "omnivideo_qi_gspo.sh", "omnivideo_qi", raw_omnivideo_qi, "validation",
        "reward/omnivideo_r1_qi/answer/mean", lora=False, env={"JUDGE_PATH": str(judge)},
        convert_flags=("--input", "{raw}/merged_train_all_qi.jsonl", "--path-map", "./data={raw}/data",
                       "--val-size", "2"))
    assert config["trainer"]["experiment_name"] == "qwen3_omni_omnivideo_qi_gspo"
    assert config["data"]["use_audio_in_video"] is True and config["trainer"]["engine"] == "local"
    assert config["reward"]["reward_model"]["enable"] is True
    assert config["reward"]["reward_model"]["model_path"] == str(judge)
    assert config["reward"]["custom_reward_function"]["path"] == "pkg://omni_rewards.scorers.omnivideo_qi_judge"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(row["reward/errors"] == 0 and row["reward/timeouts"] == 0 for row in rows[1:]), rows
    # The tiny policy never writes an <answer>, so no rule pays one: a paid answer is the judge's
    # verdict on an open row (QI_VERDICTS["answer"]).
    assert any(row["reward/omnivideo_r1_qi/answer/mean"] > 0 for row in rows[1:]), rows


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
    """The Qwen2.5-Omni scripts target verl on one GPU; ENGINE=local runs the same recipe here
    on the tiny Qwen2.5-Omni."""
    config = run_recipe(tmp_path, tiny_qwen25, script, recipe, make_raw, val_split, scorer_metric)
    assert config["trainer"]["experiment_name"] == f"qwen2_5_omni_{recipe}_gspo_lora"  # the script's setting
    assert config["actor_rollout_ref"]["rollout"]["pipeline_name"] == "qwen2_5_omni"
    assert config["trainer"]["engine"] == "local"


@pytest.mark.slow
def test_opd_recipe_runs_in_tiny_cpu_mode(tmp_path: Path, tiny: Path) -> None:
    """examples/mmk12_opd_lora.sh targets verl on two nodes; with ENGINE=local the same recipe
    runs here: the tiny model teaches its noised copy."""
    from omni_training.noise import main as noise

    raw, data, run, student = tmp_path / "raw", tmp_path / "data", tmp_path / "run", tmp_path / "student"
    raw.mkdir()
    raw_mmk12(raw)
    assert convert(["mmk12", "--input", str(raw), "--output-dir", str(data)]) == 0
    assert noise(["--src", str(tiny), "--out", str(student), "--fraction", "0.25", "--seed", "0"]) == 0
    env = {**os.environ, "MODEL_PATH": str(student), "TEACHER_PATH": str(tiny), "UV_PYTHON_DOWNLOADS": "never",
           "TRAIN_FILE": str(data / "train.parquet"), "VAL_FILE": str(data / "test.parquet"), **LOCAL_ON_CPU}
    done = subprocess.run(
        ["bash", str(ROOT / "examples" / "mmk12_opd_lora.sh"), *TINY_MODE, f"trainer.default_local_dir={run}"],
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


def raw_omni_preference(root: Path) -> None:
    """A small raw Omni-Preference release: image and audio judgements in its layout."""
    def record(modality: str, media: str, question: str, better: str) -> dict[str, Any]:
        text = (f"Judge the answers.\n### Context\n{modality.capitalize()} file: {media}\nQuestion: {question}\n"
                "Candidate A: It shows 4.\nCandidate B: I cannot tell.")
        return {f"{modality}s": [media], "messages": [{"role": "user", "content": text}],
                "solution": json.dumps({"score_A": 8, "score_B": 2, "better": better})}

    images, audios = root / "rlaif-v-dataset" / "coco", root / "audio_files" / "audio_files"
    images.mkdir(parents=True)
    audios.mkdir(parents=True)
    lines: dict[str, list[dict[str, Any]]] = {"image": [], "audio": []}
    for i in range(8):
        (images / f"p{i}.png").write_bytes(png(i))
        wav(audios / f"t{i}.wav", hz=220.0 + 40 * i)
        lines["image"].append(record("image", f"/data/rlaif-v-dataset/coco/p{i}.png", f"How many dots? ({i})", "A"))
        lines["audio"].append(record("audio", f"/data/audio/t{i}.wav", f"How many beeps? ({i})", "A"))
    for modality, records in lines.items():
        path = root / "dataset_jsonl" / modality / "final_rl_data.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in records))


DPO_ENGINES = {
    "local": ({"ENGINE": "local"}, ["actor_rollout_ref.actor.ppo_mini_batch_size=1"]),
    # verl's actor workers on two gloo ranks: each update takes a pair on each.
    "verl": ({"ENGINE": "verl"}, ["trainer.device=cpu", "trainer.n_gpus_per_node=2",
                                  "actor_rollout_ref.actor.ppo_mini_batch_size=2"]),
}


def run_dpo_recipe(tmp_path: Path, tiny: Path, engine: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """examples/qwen3_omni_dpo_lora.sh in tiny mode on a converted synthetic release, into
    ``tmp_path / "run"`` (converted once per ``tmp_path``)."""
    engine_env, engine_keys = DPO_ENGINES[engine]
    raw, data, run = tmp_path / "raw", tmp_path / "data", tmp_path / "run"
    if not data.is_dir():
        raw_omni_preference(raw)
        assert convert(["omni_preference", "--input", str(raw), "--output-dir", str(data), "--modalities", "image",
                        "audio", "--test-ratio", "0.25"]) == 0
    env = {**os.environ, "MODEL_PATH": str(tiny), "DATA_DIR": str(data), "MODALITIES": "image audio",
           "UV_PYTHON_DOWNLOADS": "never", "RAY_DEDUP_LOGS": "0", **engine_env}
    tiny_mode = ["data.train_batch_size=2", *engine_keys,
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "data.val_max_samples=2",
                 "actor_rollout_ref.model.lora_rank=4", "trainer.total_training_steps=2", "trainer.save_freq=0",
                 "trainer.test_freq=2", "actor_rollout_ref.actor.optim.lr_warmup_steps=0",
                 "actor_rollout_ref.model.enable_gradient_checkpointing=false"]
    done = subprocess.run(
        ["bash", str(ROOT / "examples" / "qwen3_omni_dpo_lora.sh"), *tiny_mode, f"trainer.default_local_dir={run}", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def check_dpo_recipe_run(run: Path, engine: str) -> list[dict[str, Any]]:
    """Two steps, LoRA on the experts too, one modality a batch, validation at the end balanced
    over the modalities; returns the rows of ``metrics.jsonl``."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1.0, 2.0]  # the script validates at the end only
    for row in rows:
        for key in ("loss", "rewards/accuracies", "rewards/margins", "actor/grad_norm"):
            assert isinstance(row[key], float) and math.isfinite(row[key]), (key, row)
        assert sum(f"{m}/rewards/accuracies" in row for m in ("image", "audio")) == 1  # one modality a batch
    validated = rows[-1]
    assert validated["val/num_samples"] == 2 and validated["val/image/num_samples"] == 1
    assert validated["val/audio/num_samples"] == 1  # val_max_samples split evenly over the modalities
    import yaml

    config = yaml.safe_load((run / "config.yaml").read_text())
    model = config["actor_rollout_ref"]["model"]
    assert model["target_parameters"] == ["gate_up_proj", "down_proj"] and model["lora_rank"] == 4
    assert config["actor_rollout_ref"]["actor"]["omni_loss"]["label_smoothing"] == 0.1
    assert config["trainer"]["engine"] == engine
    return rows


@pytest.mark.slow
def test_dpo_recipe_runs_in_tiny_cpu_mode(tmp_path: Path, tiny: Path) -> None:
    """examples/qwen3_omni_dpo_lora.sh is sized for the 30B model; here it runs two steps of it
    on the local engine (the verl engine's run is the next test)."""
    run_dpo_recipe(tmp_path, tiny, "local")
    check_dpo_recipe_run(tmp_path / "run", "local")


@pytest.mark.slow
def test_dpo_recipe_on_verl_starts_at_its_reference_and_resumes(tmp_path: Path, tiny: Path) -> None:
    """The same recipe on the verl engine (its FSDP actor on two gloo ranks, no rollout). LoRA:
    before training the policy is its reference (the adapter is zero), so every validation
    reward is exactly 0; after training they are not, since the reference stays the
    adapter-disabled base. A second launch with one more step resumes from the verl checkpoint."""
    run = tmp_path / "run"
    run_dpo_recipe(tmp_path, tiny, "verl", "trainer.val_before_train=true", "trainer.save_freq=2",
                   "actor_rollout_ref.actor.optim.lr=1e-3")
    rows = check_dpo_recipe_run(run, "verl")
    (before,) = [json.loads(line)["data"] for line in sorted((run / "metrics").glob("verl-*.jsonl"))[0].read_text().splitlines()
                 if json.loads(line)["step"] == 0]
    assert before["val/num_samples"] == 2
    assert before["val/chosen_rewards"] == 0 and before["val/rejected_rewards"] == 0
    assert rows[-1]["val/reward_margin"] != 0 and rows[-1]["val/chosen_rewards"] != 0
    done = run_dpo_recipe(tmp_path, tiny, "verl", "trainer.total_training_steps=3", "trainer.save_freq=1",
                          "actor_rollout_ref.actor.optim.lr=1e-3")
    assert "step    3/3" in done.stdout and "step    1/3" not in done.stdout
    assert (run / "latest_checkpointed_iteration.txt").read_text() == "3"
    resumed = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert resumed == [1.0, 2.0, 3.0]
