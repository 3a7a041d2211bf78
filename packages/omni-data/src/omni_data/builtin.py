"""The built-in task of the embedded default, generated offline: answer with a number.

Each prompt carries a small generated picture and a synthetic tone (so the image and audio paths
of the model run every step) and asks for a number (:func:`builtin_rows`). The reward is
verifiable and has variance soon after random initialisation, which a tiny model needs to learn
from: ``omni_rewards.scorers.builtin_digits``, registered for :data:`DATA_SOURCE`. The clip task
(:func:`clip_specs`) is a short video instead, whose soundtrack beeps one to three times. The
preference task (:func:`builtin_pairs`) asks the same questions, one modality a row as
verl-omni's Omni-Preference release has them, the chosen answer a number and the rejected one an
evasion: a policy that learns the preference prefers numbers on held-out questions too.

The local engine trains on the rows in memory; engines that read files (verl) get the same rows
(same seeds: training rows from the seed, validation rows from the seed + 1) as omni-data's RL
parquet (:func:`write_builtin_task`, :func:`write_builtin_clips`, :func:`write_builtin_pairs`): the
picture as PNG bytes, the tone as a 16 kHz WAV file and each clip as an mp4 (PyAV's bundled libav;
:func:`write_clip`) beside the parquet, the question after the media placeholders, so both
engines template the same prompt.
"""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf  # type: ignore[import-untyped]

from omni_data.preference import preference_row
from omni_data.schema import rl_row, write_rl_parquet

DATA_SOURCE = "omni_rl/builtin_digits"
"""The built-in task's rows' data source (``omni_rewards.scorers.builtin_digits`` is registered for it)."""
PREFERENCE_DATA_SOURCE = "omni_rl/builtin_preference"
QUESTIONS = (
    "How many dots are in the picture?",
    "How many beeps do you hear?",
    "What number comes next: 1, 2, 3?",
    "How old is the tone?",
    "Count the colours you see.",
    "Give any number.",
    "What is {a} + {b}?",
    "What is {a} times {b}?",
)

ANY_NUMBER = "any number"
"""The ground truth of a question with no single right number (the reward asks for a number)."""


def expected_answer(template: str, a: int, b: int) -> str:
    """What a row's question asks for, written as its ground truth (the reward is the number's
    format, not its value: see ``omni_rewards.scorers.builtin_digits``)."""
    if "+" in template:
        return str(a + b)
    if "times" in template:
        return str(a * b)
    if "1, 2, 3" in template:
        return "4"
    return ANY_NUMBER


def builtin_rows(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` task rows: chat messages, one picture, one tone, the reward fields."""
    from PIL import Image

    rng = random.Random(seed)
    rows = []
    for index in range(count):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        template = rng.choice(QUESTIONS)
        question = template.format(a=a, b=b)
        colour = tuple(rng.randint(0, 255) for _ in range(3))
        picture = Image.new("RGB", (64, 64), colour)
        hz = rng.choice((220.0, 330.0, 440.0, 660.0))
        t = np.arange(16_000 // 2) / 16_000
        tone = (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": [
                        {"type": "image"}, {"type": "audio"}, {"type": "text", "text": question},
                    ]},
                ],
                "images": [picture],
                "audios": [tone],
                "data_source": DATA_SOURCE,
                "ground_truth": expected_answer(template, a, b),
                "index": index,
            }
        )
    return rows


CLIP_QUESTION = "How many beeps do you hear?"
CLIP_SECONDS = 2.0
"""Each built-in clip's length: two of the tiny model's temporal patches at 2 frames a second,
so the soundtrack's chunks fall between frames."""


def clip_specs(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` clips of the built-in video task: each one's colour, beeps (1 to 3, the ground
    truth) and pitch."""
    rng = random.Random(seed)
    return [{"index": index, "colour": tuple(rng.randint(0, 255) for _ in range(3)), "beeps": rng.randint(1, 3),
             "hz": rng.choice((330.0, 440.0, 660.0))} for index in range(count)]


MODALITIES = ("image", "audio", "text")
EVASIONS = (
    "I cannot tell from this.",
    "Hard to say, sorry.",
    "It depends on what you mean.",
    "Let me think about it later.",
    "That is not clear to me.",
    "Nobody knows for sure.",
)
VALIDATION_PAIRS = 24
"""Validation pairs of the built-in preference task."""


def builtin_pairs(count: int, seed: int, media_dir: Path, *, split: str) -> list[dict[str, Any]]:
    """``count`` preference rows, modalities in turn; media written under ``media_dir``."""
    media_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    rows = []
    for source in builtin_rows(count, seed=seed):
        index = source["index"]
        modality = MODALITIES[index % len(MODALITIES)]
        (message,) = source["messages"]
        question = next(part["text"] for part in message["content"] if part["type"] == "text")
        truth = source["ground_truth"]
        number = truth if truth != ANY_NUMBER else str(rng.randint(1, 9))
        media: dict[str, Any] = {}
        if modality == "image":
            path = media_dir / f"picture-{index}.png"
            source["images"][0].save(path)
            media["images"] = [str(path)]
        elif modality == "audio":
            path = media_dir / f"tone-{index}.wav"
            sf.write(path, source["audios"][0], 16_000)
            media["audios"] = [str(path)]
        placeholder = "" if modality == "text" else f"<{modality}>"
        rows.append(preference_row(
            data_source=PREFERENCE_DATA_SOURCE, messages=[{"role": "user", "content": f"{placeholder}{question}"}],
            chosen=f"{number}.", rejected=rng.choice(EVASIONS), modality=modality,
            extra_info={"split": split, "index": index}, win_score=1.0, lose_score=0.0, **media,
        ))
    return rows


def _publish(rows: list[dict[str, Any]], path: Path) -> None:
    """``rows`` as RL parquet at ``path``, whole or not at all: a cached file another run reads is
    never half-written."""
    tmp = path.with_suffix(".tmp")
    write_rl_parquet(rows, tmp)
    tmp.replace(path)


def write_builtin_pairs(out_dir: Path, *, train_pairs: int, seed: int) -> tuple[Path, Path]:
    """The built-in pairs as ``(train, val)`` parquet paths under ``out_dir``, written once per size
    and seed (training pairs from ``seed``, :data:`VALIDATION_PAIRS` validation pairs from ``seed + 1``)."""
    out = Path(out_dir) / f"builtin-preference-{train_pairs}-{VALIDATION_PAIRS}-seed{seed}"
    paths = []
    for name, count, split_seed in (("train", train_pairs, seed), ("val", VALIDATION_PAIRS, seed + 1)):
        path = out / f"{name}.parquet"
        if not path.is_file():
            _publish(builtin_pairs(count, split_seed, out / f"{name}-media", split=name), path)
        paths.append(path)
    return paths[0], paths[1]


BUILTIN_VALIDATION_ROWS = 16
"""Validation rows of the built-in task (the local engine validates on as many)."""
TRAIN_FILE = "train.parquet"
VAL_FILE = "val.parquet"


def write_builtin_task(out_dir: Path, *, train_rows: int, val_rows: int, seed: int) -> tuple[Path, Path]:
    """``(train, val)`` parquet paths under ``out_dir``, written once per size and seed."""
    out_dir = Path(out_dir) / f"builtin-task-{train_rows}-{val_rows}-seed{seed}"
    train, val = out_dir / TRAIN_FILE, out_dir / VAL_FILE
    if not (train.is_file() and val.is_file()):
        _write(builtin_rows(train_rows, seed=seed), out_dir / "train-media", train, split="train")
        _write(builtin_rows(val_rows, seed=seed + 1), out_dir / "val-media", val, split="val")
    return train, val


def _write(rows: list[dict[str, Any]], media_dir: Path, path: Path, *, split: str) -> None:
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
    _publish(written, path)


def write_builtin_clips(out_dir: Path, *, train_rows: int, val_rows: int, seed: int) -> tuple[Path, Path]:
    """``(train, val)`` parquet paths of the built-in clip task under ``out_dir``, written once
    per size and seed."""
    out_dir = Path(out_dir) / f"builtin-clips-{train_rows}-{val_rows}-seed{seed}"
    train, val = out_dir / TRAIN_FILE, out_dir / VAL_FILE
    for path, specs, split in ((train, clip_specs(train_rows, seed), "train"),
                               (val, clip_specs(val_rows, seed + 1), "val")):
        if not path.is_file():
            _write_clips(specs, out_dir / f"{split}-media", path, split=split)
    return train, val


def _write_clips(specs: list[dict[str, Any]], media_dir: Path, path: Path, *, split: str) -> None:
    media_dir.mkdir(parents=True, exist_ok=True)
    rate, fps, seconds = 16_000, 4, CLIP_SECONDS
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
            data_source=DATA_SOURCE, messages=[{"role": "user", "content": f"<video>{CLIP_QUESTION}"}],
            ground_truth=str(spec["beeps"]), ability="digits", extra_info={"split": split, "index": spec["index"]},
            videos=[str(clip)],
        ))
    _publish(rows, path)


def write_clip(path: Path, frames: list[Any], fps: int, sound: Any, rate: int) -> Path:
    """An mp4 of ``frames`` (``[H, W, 3]`` uint8) at ``fps`` with ``sound`` (``[channels,
    samples]`` float32, one or two channels) as its AAC soundtrack; no ffmpeg binary needed."""
    import av

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
