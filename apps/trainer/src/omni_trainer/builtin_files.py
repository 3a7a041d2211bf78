"""The built-in task as RL parquet files, for engines that read data from files (verl).

The local engine trains the embedded default on :func:`omni_trainer.builtin_task.builtin_rows`
in memory; verl's dataloader reads parquet. These are the same rows (same seeds: the
training rows from ``data.seed``, the validation rows from ``data.seed + 1``) in omni-data's
RL row format: the picture as PNG bytes, the tone as a 16 kHz WAV file beside the parquet,
the question after ``<image><audio>``, so both engines template the same prompt.

With ``data.use_audio_in_video`` (or ``data.soundtrack_as_audio``) the built-in task is the clip task
(:func:`omni_trainer.builtin_task.clip_specs`), on both engines from files: each clip an mp4
(frames and an AAC soundtrack, written with PyAV's bundled libav) beside the parquet.

:func:`builtin_judge` is the built-in task's judge, a tiny checkpoint built offline
(``trainer tiny-judge``); :func:`qi_judge` is a tiny judge for OmniVideo-R1 QI's judged reward
(``trainer tiny-judge --qi``).
"""

from __future__ import annotations

import io
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omni_rewards.scorers.builtin_digits import JUDGE_RUBRIC, digits_rule, judge_answer

from omni_trainer import builtin_task
from omni_trainer.builtin_preference import builtin_preference_files
from omni_trainer.embedded_model import EMBEDDED_MODEL, embedded_model_path
from omni_trainer.tasks import PREFERENCE, task_name

BUILTIN_VALIDATION_ROWS = 16
"""Validation rows of the built-in task (the local engine validates on as many)."""
TRAIN_FILE = "train.parquet"
VAL_FILE = "val.parquet"


def write_builtin_task(out_dir: Path, *, train_rows: int, val_rows: int, seed: int) -> tuple[Path, Path]:
    """``(train, val)`` parquet paths under ``out_dir``, written once per size and seed."""
    out_dir = Path(out_dir) / f"builtin-task-{train_rows}-{val_rows}-seed{seed}"
    train, val = out_dir / TRAIN_FILE, out_dir / VAL_FILE
    if not (train.is_file() and val.is_file()):
        _write(builtin_task.builtin_rows(train_rows, seed=seed), out_dir / "train-media", train, split="train")
        _write(builtin_task.builtin_rows(val_rows, seed=seed + 1), out_dir / "val-media", val, split="val")
    return train, val


def _write(rows: list[dict[str, Any]], media_dir: Path, path: Path, *, split: str) -> None:
    import soundfile as sf  # type: ignore[import-untyped]

    from omni_data.schema import rl_row, write_rl_parquet

    media_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for row in rows:
        (message,) = row["messages"]
        question = next(part["text"] for part in message["content"] if part["type"] == "text")
        png = io.BytesIO()
        row["images"][0].save(png, format="PNG")
        tone = media_dir / f"tone-{row['index']}.wav"
        sf.write(tone, row["audios"][0], 16_000)
        written.append(rl_row(
            data_source=row["data_source"], messages=[{"role": "user", "content": f"<image><audio>{question}"}],
            ground_truth=row["ground_truth"], ability="digits", extra_info={"split": split, "index": row["index"]},
            images=[{"bytes": png.getvalue(), "path": f"picture-{row['index']}.png"}], audios=[str(tone)],
        ))
    tmp = path.with_suffix(".tmp")
    write_rl_parquet(written, tmp)
    tmp.replace(path)


def write_builtin_clips(out_dir: Path, *, train_rows: int, val_rows: int, seed: int) -> tuple[Path, Path]:
    """``(train, val)`` parquet paths of the built-in clip task under ``out_dir``, written once
    per size and seed."""
    out_dir = Path(out_dir) / f"builtin-clips-{train_rows}-{val_rows}-seed{seed}"
    train, val = out_dir / TRAIN_FILE, out_dir / VAL_FILE
    for path, specs, split in ((train, builtin_task.clip_specs(train_rows, seed), "train"),
                               (val, builtin_task.clip_specs(val_rows, seed + 1), "val")):
        if not path.is_file():
            _write_clips(specs, out_dir / f"{split}-media", path, split=split)
    return train, val


def _write_clips(specs: list[dict[str, Any]], media_dir: Path, path: Path, *, split: str) -> None:
    import numpy as np

    from omni_data.schema import rl_row, write_rl_parquet

    media_dir.mkdir(parents=True, exist_ok=True)
    rate, fps, seconds = 16_000, 4, builtin_task.CLIP_SECONDS
    rows = []
    for spec in specs:
        t = np.arange(int(seconds * rate)) / rate
        # The beeps: 0.2 s each, evenly spaced; the frames light up while one sounds.
        starts = [(i + 0.5) * seconds / (spec["beeps"] + 1) for i in range(spec["beeps"])]
        on = np.zeros_like(t, dtype=bool)
        for start in starts:
            on |= (t >= start) & (t < start + 0.2)
        sound = (0.3 * np.sin(2 * np.pi * spec["hz"] * t) * on).astype(np.float32)
        frames = []
        for i in range(int(seconds * fps)):
            lit = any(start <= i / fps < start + 0.25 for start in starts)
            frames.append(np.full((32, 32, 3), [min(255, c + (90 if lit else 0)) for c in spec["colour"]], np.uint8))
        clip = write_clip(media_dir / f"clip-{spec['index']}.mp4", frames, fps, sound[None], rate)
        rows.append(rl_row(
            data_source=builtin_task.DATA_SOURCE, messages=[{"role": "user", "content": f"<video>{builtin_task.CLIP_QUESTION}"}],
            ground_truth=str(spec["beeps"]), ability="digits", extra_info={"split": split, "index": spec["index"]},
            videos=[str(clip)],
        ))
    tmp = path.with_suffix(".tmp")
    write_rl_parquet(rows, tmp)
    tmp.replace(path)


def write_clip(path: Path, frames: list[Any], fps: int, sound: Any, rate: int) -> Path:
    """An mp4 of ``frames`` (``[H, W, 3]`` uint8) at ``fps`` with ``sound`` (``[channels,
    samples]`` float32, one or two channels) as its AAC soundtrack; no ffmpeg binary needed."""
    import av
    import numpy as np

    layout = "mono" if len(sound) == 1 else "stereo"
    with av.open(str(path), "w") as container:
        video = container.add_stream("mpeg4", rate=fps)
        video.height, video.width = frames[0].shape[:2]
        video.pix_fmt = "yuv420p"
        audio = container.add_stream("aac", rate=rate, layout=layout)
        for frame in frames:
            for packet in video.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")):
                container.mux(packet)
        for start in range(0, sound.shape[1], 1024):
            chunk = av.AudioFrame.from_ndarray(np.ascontiguousarray(sound[:, start:start + 1024]), format="fltp",
                                               layout=layout)
            chunk.sample_rate, chunk.pts = rate, start
            for packet in audio.encode(chunk):
                container.mux(packet)
        for stream in (video, audio):
            for packet in stream.encode():
                container.mux(packet)
    return Path(path)


def use_builtin_files(config: Any) -> bool:
    """For an engine that reads files: give the embedded default (no model path, no train
    files) the tiny Qwen3-Omni's cached build and the built-in task's files. Returns whether
    it did; ``config`` is changed in place before the pre-flight checks it."""
    model, data = config.actor_rollout_ref.model, config.data
    if model.path is not None or data.train_files is not None or model.stage != "thinker":
        return False
    from omni_model_kit.tiny import default_cache_dir

    model.path = embedded_model_path()
    if task_name(config) == PREFERENCE:  # the built-in pairs, as the local engine trains on
        data.train_files, data.val_files = builtin_preference_files(config)
        task = "built-in preference pairs"
    else:
        write = write_builtin_clips if data.hears_soundtracks else write_builtin_task
        train, val = write(default_cache_dir(), train_rows=data.builtin_task_size, val_rows=BUILTIN_VALIDATION_ROWS,
                           seed=data.seed)
        data.train_files, data.val_files = [str(train)], [str(val)]
        task = "built-in clip task" if data.hears_soundtracks else "built-in task"
    print(f"model: {EMBEDDED_MODEL} built offline at {model.path}; {task}: "
          f"{Path(data.train_files[0]).parent}", file=sys.stderr)
    return True


JUDGE_RULE = "builtin-digits-v1"
"""Names the built-in judge's rule (and its version) in its cache key."""


def builtin_judge() -> Path:
    """The built-in task's judge (``trainer tiny-judge``): the tiny chat model taught
    ``JUDGE_RUBRIC``'s rule on :func:`judge_examples`, built offline and cached. With it,
    ``reward.reward_model`` and ``omni_rewards.scorers.builtin_digits.compute_score_judged`` pay
    what the rule scorer pays."""
    from omni_model_kit.tiny_judge import build_tiny_judge

    policy = embedded_model_path()
    return build_tiny_judge(f"{JUDGE_RULE}-{Path(policy).name}", judge_examples())


def judge_examples() -> Callable[[random.Random], tuple[str, str]]:
    """``JUDGE_RUBRIC``'s messages about answers like the embedded policy's (1 to 4 random
    tokens of its tokenizer, a number put in front of a third of them and a digit inside another
    third), each with the rule's verdict as the judge answers it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_path())
    special = set(tokenizer.all_special_ids)
    ids = [i for i in range(len(tokenizer)) if i not in special]

    def example(rng: random.Random) -> tuple[str, str]:
        text = str(tokenizer.decode([rng.choice(ids) for _ in range(rng.randint(1, 4))], skip_special_tokens=True))
        draw = rng.random()
        if draw < 1 / 3:
            text = f"{rng.randint(0, 99)}{text}"
        elif draw < 2 / 3:
            cut = rng.randint(0, len(text))
            text = f"{text[:cut]}{rng.randint(0, 9)}{text[cut:]}"
        return JUDGE_RUBRIC.format(answer=text), judge_answer(digits_rule(text))

    return example


QI_JUDGE_RULE = "qi-rubric-v2"
"""Names the tiny QI judge's rule (and its version) in its cache key."""
QI_JUDGE_STEPS = 100
QI_VERDICTS = {"consistency": 1.0, "completeness": 0.5, "answer": 0.25}
"""The tiny QI judge's verdict per rubric (:func:`qi_judge_rule`); no rule pays an answer 0.25."""


def qi_judge() -> Path:
    """A tiny judge for OmniVideo-R1 QI's judged reward (``trainer tiny-judge --qi``): the tiny
    vision model taught :func:`qi_judge_rule` on :func:`qi_judge_examples`, built offline and
    cached. It answers :mod:`omni_rewards.scorers.omnivideo_qi_judge`'s three rubrics, frames
    and all, with a JSON score, so a tiny run's judged reward is read, never failed."""
    from omni_model_kit.tiny_judge import build_tiny_vision_judge

    return build_tiny_vision_judge(QI_JUDGE_RULE, qi_judge_examples(), steps=QI_JUDGE_STEPS)


def qi_judge_rule(rubric: str) -> float:
    """The tiny QI judge's verdict: one number per rubric (:data:`QI_VERDICTS`), whatever it is
    shown, so that a swapped verdict shows in the sum. A tiny model learns to read pictures and
    words too slowly for a test (brightness and a word, tried: under 60% after 200 steps)."""
    return QI_VERDICTS[rubric]


def qi_judge_examples() -> Callable[[random.Random], tuple[list[dict[str, Any]], list[Any], str]]:
    """Conversations as ``omnivideo_qi_judge`` asks them (its rubrics and prompts with random
    words; 1 to 8 frames of random brightness and size for a segment, text only for an
    answer), each with :func:`qi_judge_rule`'s verdict as the judge answers it."""
    import numpy as np
    from PIL import Image

    from omni_rewards.scorers import omnivideo_qi_judge as qi

    words = "a the door dog red blue opens barks man woman car bell rings plays piano water runs".split()

    def phrase(rng: random.Random) -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(0, 5)))

    def example(rng: random.Random) -> tuple[list[dict[str, Any]], list[Any], str]:
        rubric = rng.choice(sorted(QI_VERDICTS))
        images: list[Any] = []
        if rubric == "answer":
            system, text = qi.ANSWER_RUBRIC, qi.ANSWER_PROMPT.format(question=phrase(rng), ground_truth=phrase(rng),
                                                                      answer=phrase(rng))
        else:
            side = rng.choice([28, 56, 112, 336])
            images = [Image.fromarray(np.full((side, side, 3), rng.randint(0, 255), np.uint8))
                      for _ in range(rng.randint(1, 8))]
            system, text = ((qi.CONSISTENCY_RUBRIC, qi.CONSISTENCY_PROMPT.format(caption=phrase(rng)))
                            if rubric == "consistency" else (qi.COMPLETENESS_RUBRIC, qi.COMPLETENESS_PROMPT.format(
                                question=phrase(rng), ground_truth=phrase(rng))))
        messages = [{"role": "system", "content": [{"type": "text", "text": system}]},
                    {"role": "user", "content": [*({"type": "image"} for _ in images), {"type": "text", "text": text}]}]
        return messages, images, '{"score": %g}' % qi_judge_rule(rubric)

    return example
